"""``training.recompute_modules`` through HTTP (megatron-core ``--recompute-modules``, the
mechanism in solver.cost.analytic): what a selectively recomputed layer recomputes, stated by the
request, moves the prediction the way recomputing more must (more time, less activation memory)
and equals the solver's own evaluation of the same settings."""

from __future__ import annotations

import pytest

import catalog
from solver.cost.evaluate import evaluate
from solver.spec.parallel import ParallelConfig
from solver.spec.training import RecomputeModule, TrainingSpec, ZeroStage

STACK = "megatron-core-2024"  # selective_recompute "attention": Megatron's modules apply


def body(**training) -> dict:
    return {
        "model": "gpt3-1.3b", "cluster": "dgx-a100-80gb-x1", "num_gpus": 8,
        "training": {"global_batch_size": 512, "seq_length": 2048, "stack": STACK, **training},
        "parallel": {"dp_size": 2, "tp_size": 4, "pp_size": 1, "zero_stage": 1, "micro_batch_size": 2,
                     "recompute": "selective", "sequence_parallel": True},
    }


def test_recomputing_the_mlp_too_costs_time_and_saves_activation_memory(api):
    default = api.post("/v1/evaluations", json=body())
    modules = api.post("/v1/evaluations", json=body(recompute_modules=["core_attn", "mlp"]))
    assert default.status_code == modules.status_code == 200, modules.text
    before, after = default.json(), modules.json()
    assert after["prediction"]["step_time_s"] > before["prediction"]["step_time_s"]
    assert after["memory"]["breakdown_gib"]["activations"] < before["memory"]["breakdown_gib"]["activations"]
    # The same settings, evaluated by the solver directly.
    facts = catalog.get_stack_facts(STACK)
    training = TrainingSpec(512, 2048, recompute_modules=(RecomputeModule.CORE_ATTN, RecomputeModule.MLP), **facts)
    parallel = ParallelConfig(dp_size=2, tp_size=4, zero_stage=ZeroStage.OS, micro_batch_size=2, recompute="selective",
                              sequence_parallel=True)
    expected = evaluate(catalog.get_model("gpt3-1.3b"), catalog.get_cluster("dgx-a100-80gb-x1"), training, parallel, num_gpus=8)
    assert after["prediction"]["step_time_s"] == pytest.approx(expected.prediction.step_time_s, rel=1e-12)
    assert after["memory"]["peak_gib"] == pytest.approx(expected.peak_bytes / 2**30, rel=1e-12)


@pytest.mark.parametrize("training, reason_part", [
    ({"recompute_modules": ["attention"]}, "core_attn"),
    ({"recompute_modules": []}, "at least 1"),
    ({"recompute_modules": ["mlp"], "stack": "torchtitan-2025"}, "selective_recompute 'attention'"),
])
def test_bad_modules_are_a_422_naming_the_field(api, training, reason_part):
    response = api.post("/v1/evaluations", json=body(**training))
    assert response.status_code == 422, response.text
    (error,) = [e for e in response.json()["errors"] if e["field"].startswith("body.training.recompute_modules")]
    assert reason_part in error["reason"]
