"""The alltoall dispatcher's host synchronisation (``training.moe_host_s_per_layer``). Megatron-core's
MoEAlltoAllTokenDispatcher copies the per-expert token counts to the host and waits for them in
every MoE layer (megatron/core/transformer/moe/token_dispatcher.py ``_maybe_dtoh_and_synchronize``),
so the host cannot launch ahead across MoE layers: each MoE layer pass takes the longer of its GPU
work and its host work. The host time is measured from AWS's micro-batch-1 runs of Qwen3-235B-A22B
on B300 (bench/data/published_runs_aws.json), where a step is 3-4x the model's GPU time."""

from __future__ import annotations

import copy
import dataclasses
import statistics

import pytest

import catalog
from bench import accuracy
from bench.microbatch_split import critical_micro_batches
from conftest import assert_problem, error_fields
from solver.cost.analytic import BACKWARD_TO_FORWARD, analytic_profile, dispatcher_host_floor_s
from solver.cost.profile import ProfileShape
from solver.spec.errors import SpecError
from solver.spec.training import Precision, TrainingSpec

STACK_HOST_S = 0.0037
# Forward passes' worth of host work per layer in a pipeline slot: forward + backward (2) with
# selective recomputation, one forward more with full recomputation.
PASSES = {"selective": 1 + BACKWARD_TO_FORWARD, "full": 2 + BACKWARD_TO_FORWARD}


def test_the_stack_states_the_host_time_and_the_others_do_not():
    facts = {entry["name"]: entry for entry in catalog.list_entries("stacks")}
    core = facts.pop("megatron-core-2024")
    assert core["facts"]["moe_host_s_per_layer"] == STACK_HOST_S
    assert "_maybe_dtoh_and_synchronize" in core["sources"]["moe_host_s_per_layer"]
    assert all(entry["facts"]["moe_host_s_per_layer"] == 0.0 for entry in facts.values())
    with pytest.raises(SpecError) as refused:
        TrainingSpec(64, 4096, moe_host_s_per_layer=-0.001)
    assert refused.value.field == "training.moe_host_s_per_layer"


def _slot_s_per_layer(record: dict, model_layers: int) -> float:
    """A micro-batch slot's time per layer of a stage: the step over (m + pp - 1) slots of
    layers / pp layers each (1F1B)."""
    par = record["parallel"]
    slots = critical_micro_batches(par["global_batch"], par["micro_batch"], par["dp"], par["pp"])
    return record["measured"]["iteration_time_s"] / slots / (model_layers / par["pp"])


def test_the_host_time_is_the_b300_micro_batch_1_steps_per_forward_pass():
    """At micro-batch 1 the GPU's share is a quarter of the step: the slot time per layer is the
    host's, 3 or 4 forward passes' worth. Their median is the stack's figure."""
    per_pass = []
    for record in accuracy.load_aws_records():
        if record["id"].startswith("moe-aws-qwen3-p6-b300") and record["parallel"]["micro_batch"] == 1:
            per_pass.append(_slot_s_per_layer(record, 94) / PASSES[record["parallel"]["recompute"]])
    assert len(per_pass) == 4
    assert min(per_pass) > 0.0035 and max(per_pass) < 0.0039
    assert statistics.median(per_pass) == pytest.approx(STACK_HOST_S, abs=0.00005)


def test_a_pass_takes_the_longer_of_its_gpu_and_host_work():
    # The all-to-alls already on the GPU's side count toward the host's time, half each way.
    assert dispatcher_host_floor_s(0.002, 0.004, 0.001, 0.0) == (0.002, 0.004)
    assert dispatcher_host_floor_s(0.002, 0.004, 0.001, 0.003) == pytest.approx((0.0025, 0.0055))
    assert dispatcher_host_floor_s(0.010, 0.020, 0.001, 0.003) == (0.010, 0.020)


def test_only_moe_layers_wait_for_the_host():
    cluster = catalog.cluster_spec_from_dict(catalog.node_cluster_entry("dgx-h100", 8))
    model = dataclasses.replace(catalog.get_model("qwen3-30b-a3b"), first_dense_layers=1)  # one dense layer first
    plain = TrainingSpec(64, 4096, Precision.BF16)
    synced = dataclasses.replace(plain, moe_host_s_per_layer=STACK_HOST_S)
    shape = ProfileShape(1, 1, False, 1, 8)
    before = analytic_profile(model, cluster, plain, shape).transformer_layers
    after = analytic_profile(model, cluster, synced, shape).transformer_layers
    moe_flags = [model.is_moe_layer(i) for i in range(model.num_layers)]
    assert any(moe_flags) and not all(moe_flags)
    for is_moe, b, a in zip(moe_flags, before, after):
        if not is_moe:
            assert (a.forward_s, a.backward_s) == (b.forward_s, b.backward_s)
            continue
        assert a.forward_s == pytest.approx(max(b.forward_s, STACK_HOST_S - b.ep_comm_s / 2))
        assert a.backward_s == pytest.approx(max(b.backward_s, 2 * STACK_HOST_S - b.ep_comm_s / 2))
        assert a.forward_s > b.forward_s  # at one 4096-token sequence on 8 H100 the host sets the pace


def _moe_records() -> list[dict]:
    return accuracy.load_moe_records() + accuracy.load_aws_records()


def _stated_host_s(record: dict, inputs: dict) -> float:
    """The host time a record runs with: its own or its source's setting, else its stack's."""
    settings = accuracy.record_settings(record, inputs)
    return float(settings.get("moe_host_s_per_layer", catalog.get_stack_facts(settings["stack"])["moe_host_s_per_layer"]))


def _results(without_host_time: bool) -> dict[str, accuracy.RunResult]:
    """The MoE runs as the bench evaluates them, or with no host time anywhere."""
    inputs = copy.deepcopy(accuracy.load_inputs())
    if without_host_time:
        for record in _moe_records():
            inputs["records"].setdefault(record["id"], {})["moe_host_s_per_layer"] = 0.0
    return {r["id"]: accuracy.evaluate_record(r, inputs) for r in _moe_records()}


def test_it_narrows_every_alltoall_run_and_leaves_the_flex_ones():
    inputs = accuracy.load_inputs()
    before, after = _results(True), _results(False)
    # The flex-dispatcher rows (HybridEP, DeepEP; the 26.04.01 gpt-oss B300 row, the 26.06 Kimi K2
    # row and the MoE report's three among them) and DeepSeek's own framework state no host time.
    stated = {r["id"]: _stated_host_s(r, inputs) for r in _moe_records()}
    assert sum(host_s == 0 for host_s in stated.values()) == 20
    for rid, result in after.items():
        if stated[rid] == 0:
            assert result.predicted == before[rid].predicted, rid
            continue
        assert stated[rid] == STACK_HOST_S
        # Each run ends nearer its measurement, or, if it was within a few percent already (NeMo's
        # Llama 4 Scout row, +0.8%: its CUDA graphs hide host work), no more than a point further.
        assert abs(result.error) <= abs(before[rid].error) + 0.01, (rid, result.error, before[rid].error)
    # AWS's family: from all optimistic by half or more to within 20% (in sample: the four B300
    # micro-batch-1 rows the host time comes from).
    aws = [r for rid, r in after.items() if rid.startswith("moe-aws-qwen3")]
    assert all(before[r.run_id].error > 0.45 for r in aws)
    assert statistics.fmean(abs(r.error) for r in aws) < 0.20
    # Out of sample, the H100 runs (another host) at micro-batch 1 read within 12%.
    h100_mb1 = [r for r in aws if "h100" in r.run_id and r.run_id.endswith("-mb1")]
    assert len(h100_mb1) == 2 and all(abs(r.error) < 0.12 for r in h100_mb1)


def _body(**training) -> dict:
    return {
        "model": "qwen3-30b-a3b", "cluster": "dgx-h100-x8", "num_gpus": 8,
        "training": {"global_batch_size": 64, "seq_length": 4096, "precision": "bf16", "stack": "megatron-core-2024", **training},
        "parallel": {
            "dp_size": 2, "tp_size": 4, "pp_size": 1, "zero_stage": 1, "micro_batch_size": 1, "recompute": "full",
            "sequence_parallel": True, "ep_size": 8, "expert_tp_size": 1,
        },
    }


def test_the_api_takes_the_stack_host_time_and_an_override(api):
    stack = api.post("/v1/evaluations", json=_body())
    free = api.post("/v1/evaluations", json=_body(moe_host_s_per_layer=0))
    assert stack.status_code == free.status_code == 200, stack.text
    assert stack.json()["prediction"]["step_time_s"] > free.json()["prediction"]["step_time_s"]


@pytest.mark.parametrize("value", [-0.001, 5.0, "slow", True])
def test_a_bad_value_is_a_422_naming_the_field(api, value):
    response = api.post("/v1/evaluations", json=_body(moe_host_s_per_layer=value))
    assert "body.training.moe_host_s_per_layer" in error_fields(assert_problem(response, 422))
