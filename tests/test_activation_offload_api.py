"""Partial activation offload through the API: the parallel object's activation_offload_layers in
an evaluation (GPU memory down, host memory up) and a plan request that pins it."""

from __future__ import annotations

import pytest

from conftest import assert_problem

TRAINING = {"global_batch_size": 64, "seq_length": 8192, "precision": "bf16"}
PARALLEL = {"dp_size": 4, "tp_size": 1, "pp_size": 1, "zero_stage": 3, "micro_batch_size": 1, "recompute": "none"}


def _evaluate(api, **parallel):
    body = {"model": "llama3-8b", "cluster": "gb200-nvl72", "num_gpus": 4, "training": TRAINING,
            "parallel": {**PARALLEL, **parallel}}
    response = api.post("/v1/evaluations", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_an_evaluation_offloading_layers_moves_their_activations_to_the_host(api):
    without, offloaded = _evaluate(api), _evaluate(api, activation_offload_layers=16)
    saved = without["memory"]["breakdown_gib"]["activations"] - offloaded["memory"]["breakdown_gib"]["activations"]
    assert saved > 0
    # Half of the 32 layers: half the layers' kept activations, to the host of the 4-GPU tray. One
    # layer's backward working set stays on the GPU beside them, so a little under half the total,
    # and every offloaded layer frees the same bytes.
    quarter = without["memory"]["breakdown_gib"]["activations"] - _evaluate(api, activation_offload_layers=8)["memory"]["breakdown_gib"]["activations"]
    assert saved == pytest.approx(2 * quarter, rel=1e-3)
    assert 0.45 * without["memory"]["breakdown_gib"]["activations"] < saved < without["memory"]["breakdown_gib"]["activations"] / 2
    assert offloaded["memory"]["host_gib_per_node"] == pytest.approx(4 * saved, rel=0.01)
    assert without["memory"]["host_gib_per_node"] == 0


def test_offloading_under_a_pipeline_is_a_422_naming_the_field(api):
    body = {"model": "llama3-8b", "cluster": "gb200-nvl72", "num_gpus": 4, "training": TRAINING,
            "parallel": {**PARALLEL, "dp_size": 2, "pp_size": 2, "zero_stage": 1, "activation_offload_layers": 8}}
    problem = assert_problem(api.post("/v1/evaluations", json=body), 422)
    assert "activation_offload_layers" in str(problem)


def test_a_plan_that_pins_activation_offload_plans_with_it(api):
    body = {"model": "llama3-8b", "cluster": "gb200-nvl72", "num_gpus": 4, "training": TRAINING, "top_k": 1,
            "constraints": {"activation_offload_layers": [16], "pp_size": [1], "tp_size": [1]}}
    response = api.post("/v1/plans", json=body)
    assert response.status_code in (200, 201), response.text
    plan = response.json()
    assert plan["status"] == "succeeded", plan
    best = plan["candidates"][0]
    assert best["parallel"]["activation_offload_layers"] == 16
    assert best["parallel"]["recompute"] == "none" and best["parallel"]["pp_size"] == 1
