"""The fused attention kernel's generation (``TrainingSpec.flash_kernel``, issue 13 mechanism 2).

FlashAttention 1.x and its Triton port take twice FlashAttention-2's time (flash-attn's changelog:
"2.0: Complete rewrite, 2x faster"; the Triton port's docstring: slightly slower than the CUDA
1.x kernels). llm-foundry's 2023 MPT benchmarks ran that Triton port (attn_impl 'triton'), so the
pytorch-fsdp1-2023 stack states fa1; every other flash stack runs FlashAttention-2-class kernels.
"""

from __future__ import annotations

import dataclasses

import pytest

import catalog
from bench.accuracy import evaluate_bench
from conftest import assert_problem, error_fields
from solver.cost.analytic import FLASH_V1_TIME_FACTOR, _attention_core_s, analytic_profile
from solver.cost.profile import ProfileShape
from solver.spec.errors import SpecError
from solver.spec.training import FlashKernel, TrainingSpec

MPT_7B = catalog.get_model("mpt-7b")


def cluster():
    return catalog.cluster_spec_from_dict(catalog.node_cluster_entry("dgx-a100-80gb", 8))


def test_fa2_is_the_default_and_names_read_as_the_enum():
    assert TrainingSpec(8, 2048).flash_kernel is FlashKernel.FA2
    assert TrainingSpec(8, 2048, flash_kernel="fa1").flash_kernel is FlashKernel.FA1
    with pytest.raises(SpecError) as error:
        TrainingSpec(8, 2048, flash_kernel="fa3")
    assert error.value.field == "training.flash_kernel"


def test_an_fa1_kernel_takes_twice_the_attention_cores_time_and_nothing_else_moves():
    gpu = cluster().gpu
    fa2 = TrainingSpec(8, 2048)
    fa1 = dataclasses.replace(fa2, flash_kernel=FlashKernel.FA1)
    elementwise = None  # the fused path reads no element-wise costs
    forward2, backward2, scores2 = _attention_core_s(MPT_7B, gpu, fa2, 32.0, 2048, elementwise)  # type: ignore[arg-type]
    forward1, backward1, scores1 = _attention_core_s(MPT_7B, gpu, fa1, 32.0, 2048, elementwise)  # type: ignore[arg-type]
    assert FLASH_V1_TIME_FACTOR == 2.0
    assert forward1 == pytest.approx(2.0 * forward2) and backward1 == pytest.approx(2.0 * backward2)
    assert scores1 == scores2 == 0.0
    # In a whole layer: the attention core's time doubles, its memory does not move.
    shape = ProfileShape(1, 4, False)
    layer2 = analytic_profile(MPT_7B, cluster(), fa2, shape).transformer_layers[0]
    layer1 = analytic_profile(MPT_7B, cluster(), fa1, shape).transformer_layers[0]
    # The layer runs the core once over micro-batch x heads (4 x 32) batched GEMMs.
    forward2, backward2, _ = _attention_core_s(MPT_7B, gpu, fa2, 4 * MPT_7B.num_attention_heads, 2048, elementwise)  # type: ignore[arg-type]
    assert layer1.forward_s - layer2.forward_s == pytest.approx(forward2, rel=1e-6)
    assert layer1.backward_s - layer2.backward_s == pytest.approx(backward2, rel=1e-6)
    assert layer1.activation_bytes == layer2.activation_bytes and layer1.checkpoint_bytes == layer2.checkpoint_bytes


def test_without_flash_attention_the_kernel_generation_is_not_read():
    eager = TrainingSpec(8, 2048, flash_attention=False)
    shape = ProfileShape(1, 4, False)
    one = analytic_profile(MPT_7B, cluster(), eager, shape).transformer_layers[0]
    other = analytic_profile(MPT_7B, cluster(), dataclasses.replace(eager, flash_kernel=FlashKernel.FA1), shape).transformer_layers[0]
    assert one == other


def test_only_the_llm_foundry_stack_runs_an_fa1_kernel_and_says_why():
    stacks = catalog.list_entries("stacks")
    kernels = {entry["name"]: catalog.get_stack_facts(entry["name"])["flash_kernel"] for entry in stacks}
    assert kernels.pop("pytorch-fsdp1-2023") == "fa1"
    assert set(kernels.values()) == {"fa2"}
    entry = catalog.get_entry("stacks", "pytorch-fsdp1-2023")
    assert "attn_impl 'triton'" in entry["sources"]["flash_kernel"]


def test_the_llm_foundry_family_moves_toward_its_measurements():
    """9 of its 12 rows are within 10% now (7 with FlashAttention-2's time), and the family within
    the issue's 12% (13.4% before). Left out: MPT-13B on 8 A100-40GB and MPT-7B on 8 H100, still
    optimistic, and MPT-70B on 64 A100-40GB (-23.5%, pessimistic already and unmoved: its step is
    bound by FSDP traffic)."""
    rows = [r for r in evaluate_bench() if r.family == "llmfoundry" and r.error is not None]
    assert len(rows) == 12  # the four multi-node H100 rows state no network (not expressible)
    mape = sum(abs(r.error) for r in rows) / len(rows)
    assert mape <= 0.12
    within = [r.run_id for r in rows if abs(r.error) <= 0.10]
    assert len(within) == 9, [(r.run_id, round(r.error, 3)) for r in rows]


def _body(**training) -> dict:
    return {
        "model": "mpt-7b", "cluster": "dgx-a100-80gb", "num_gpus": 8,
        "training": {"global_batch_size": 96, "seq_length": 2048, "stack": "pytorch-fsdp1-2023", **training},
        "parallel": {"dp_size": 8, "tp_size": 1, "pp_size": 1, "zero_stage": 3, "micro_batch_size": 6, "recompute": "none"},
    }


def test_the_api_takes_the_stacks_kernel_and_an_override(api):
    stack = api.post("/v1/evaluations", json=_body())
    fa2 = api.post("/v1/evaluations", json=_body(flash_kernel="fa2"))
    assert stack.status_code == fa2.status_code == 200, stack.text
    assert stack.json()["prediction"]["step_time_s"] > fa2.json()["prediction"]["step_time_s"]
    listed = api.get("/v1/catalog/stacks/pytorch-fsdp1-2023")
    assert listed.status_code == 200 and listed.json()["facts"]["flash_kernel"] == "fa1"


@pytest.mark.parametrize("value", ["fa3", 2, "FA1"])
def test_a_bad_override_is_a_422_naming_the_field(api, value):
    response = api.post("/v1/evaluations", json=_body(flash_kernel=value))
    assert "body.training.flash_kernel" in error_fields(assert_problem(response, 422))
