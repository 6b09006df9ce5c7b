"""Tensor parallelism wider than the KV heads (``training.kv_head_subsharding``). Megatron-core
0.16.0 on (NVIDIA/Megatron-LM #2565, megatron/core/transformer/attention.py) lets tp be any
multiple of the KV heads: every rank computes its 1/tp of the fused QKV projection, all-gathers
the result over the TP group and keeps its KV group's slice, then its own query heads. The stack
that stands for NVIDIA's current containers states it; the others keep the old rule."""

from __future__ import annotations

import dataclasses

import pytest

import catalog
from conftest import assert_problem, error_fields
from solver.cost.analytic import analytic_profile, qkv_subshard_gather_s
from solver.cost.comm import all_reduce_s, tp_link
from solver.cost.evaluate import evaluate
from solver.cost.profile import ProfileShape
from solver.frameworks import ExportFormat, PlanToExport, export_plan
from solver.spec.errors import SpecError
from solver.spec.parallel import ParallelConfig
from solver.spec.rules import Rule
from solver.spec.training import Precision, Recompute, TrainingSpec, ZeroStage

QWEN3 = "qwen3-30b-a3b"  # 32 query heads, 4 KV heads of 128, hidden 2048


def _cluster(num_gpus: int = 8):
    return catalog.cluster_spec_from_dict(catalog.node_cluster_entry("dgx-h100", num_gpus))


def _parallel(tp: int, num_gpus: int = 8) -> ParallelConfig:
    return ParallelConfig(
        dp_size=num_gpus // tp, tp_size=tp, pp_size=1, zero_stage=ZeroStage.OS, micro_batch_size=1,
        recompute=Recompute.FULL, sequence_parallel=True,
    )


def test_only_the_stack_that_sub_shards_takes_tp_above_the_kv_heads():
    facts = {entry["name"]: entry["facts"]["kv_head_subsharding"] for entry in catalog.list_entries("stacks")}
    assert facts.pop("megatron-core-2024") is True
    assert set(facts.values()) == {False}
    model = catalog.get_model(QWEN3)
    assert model.num_kv_heads == 4
    strict = TrainingSpec(64, 4096, Precision.BF16)
    subsharded = dataclasses.replace(strict, kv_head_subsharding=True)
    with pytest.raises(SpecError) as refused:
        evaluate(model, _cluster(), strict, _parallel(8), num_gpus=8)
    assert (refused.value.field, refused.value.rule) == ("parallel.tp_size", Rule.TP_DIVIDES_NUM_KV_HEADS)
    assert "training.kv_head_subsharding" in str(refused.value)  # the way to run it
    assert evaluate(model, _cluster(), subsharded, _parallel(8), num_gpus=8).prediction.step_time_s > 0
    # A multiple of the KV heads, nothing else: 32 heads split 16 ways, yet 16 is 4 x 4.
    assert evaluate(model, _cluster(16), subsharded, _parallel(16, 16), num_gpus=16).prediction.step_time_s > 0
    with pytest.raises(SpecError) as refused:
        TrainingSpec(64, 4096, kv_head_subsharding="yes")
    assert refused.value.field == "training.kv_head_subsharding"


def test_a_model_whose_kv_heads_are_not_a_divisor_of_tp_is_refused_with_the_reason():
    model = dataclasses.replace(catalog.get_model("llama3-8b"), num_attention_heads=48, num_kv_heads=8, head_dim=128, hidden_size=6144)
    training = TrainingSpec(64, 4096, Precision.BF16, kv_head_subsharding=True)
    with pytest.raises(SpecError) as refused:
        evaluate(model, _cluster(), training, _parallel(6, 6), num_gpus=6)  # 8 KV heads on 6 ranks: neither way round
    assert refused.value.rule is Rule.TP_DIVIDES_NUM_KV_HEADS
    assert "nor is a multiple of it" in str(refused.value)


def test_the_qkv_activations_cross_the_tp_group_once_each_way():
    """The extra collectives are one all-gather of the tokens x (q + 2 kv) QKV output forward and its
    reduce-scatter backward: an all-reduce's volume, added to the layer's TP time."""
    cluster, model = _cluster(), catalog.get_model(QWEN3)
    wide_kv = dataclasses.replace(model, num_kv_heads=8)  # the same model with KV heads tp divides
    training = TrainingSpec(64, 4096, Precision.BF16, kv_head_subsharding=True)
    shape = ProfileShape(8, 2, True)
    tokens = 2 * 4096
    sub = analytic_profile(model, cluster, training, shape).transformer_layers[0]
    whole = analytic_profile(wide_kv, cluster, training, shape).transformer_layers[0]
    qkv_bytes = 2 * tokens * (32 * 128 + 2 * 4 * 128)
    expected_s = all_reduce_s(qkv_bytes, 8, tp_link(cluster, 8))
    assert qkv_subshard_gather_s(model, cluster, tokens, 8) == pytest.approx(expected_s)
    assert sub.tp_comm_s - whole.tp_comm_s == pytest.approx(expected_s)
    assert expected_s > 0
    assert qkv_subshard_gather_s(model, cluster, tokens, 4) == 0.0  # tp divides the KV heads: nothing extra


def _body(**training) -> dict:
    return {
        "model": QWEN3, "cluster": "dgx-h100-x8", "num_gpus": 8,
        "training": {"global_batch_size": 64, "seq_length": 4096, "precision": "bf16", **training},
        "parallel": {
            "dp_size": 1, "tp_size": 8, "pp_size": 1, "zero_stage": 1, "micro_batch_size": 1, "recompute": "full",
            "sequence_parallel": True, "ep_size": 8, "expert_tp_size": 1,
        },
    }


def test_the_api_plans_tp_above_the_kv_heads_on_the_stack_that_runs_it(api):
    core = api.post("/v1/evaluations", json=_body(stack="megatron-core-2024"))
    assert core.status_code == 200, core.text
    assert core.json()["prediction"]["step_time_s"] > 0
    refused = api.post("/v1/evaluations", json=_body(stack="torchtitan-2025"))
    assert "body.parallel.tp_size" in error_fields(assert_problem(refused, 422))
    overridden = api.post("/v1/evaluations", json=_body(stack="torchtitan-2025", kv_head_subsharding=True))
    assert overridden.status_code == 200, overridden.text
    stack = api.get("/v1/catalog/stacks/megatron-core-2024").json()
    assert stack["facts"]["kv_head_subsharding"] is True and "#2565" in stack["sources"]["kv_head_subsharding"]


@pytest.mark.parametrize("value", ["yes", 1])
def test_a_bad_value_is_a_422_naming_the_field(api, value):
    response = api.post("/v1/evaluations", json=_body(stack="megatron-core-2024", kv_head_subsharding=value))
    assert "body.training.kv_head_subsharding" in error_fields(assert_problem(response, 422))


@pytest.mark.parametrize(
    ("fmt", "framework", "subshards"),
    [
        (ExportFormat.MEGATRON, "Megatron-LM", True),
        (ExportFormat.NEMO, "NeMo", True),
        (ExportFormat.TORCHTITAN, "torchtitan", False),
        (ExportFormat.DEEPSPEED, "Megatron-DeepSpeed", False),
    ],
)
def test_exports_say_what_tp_above_the_kv_heads_needs(fmt, framework, subshards):
    """Megatron-LM and NeMo run it from Megatron-core 0.16.0; torchtitan and Megatron-DeepSpeed split
    K and V into whole heads, which a note says, pointing at the planning setting that keeps to it."""
    model = catalog.get_model("llama3-8b")  # 8 KV heads
    training = TrainingSpec(64, 4096, Precision.BF16, kv_head_subsharding=True)
    wide = ParallelConfig(dp_size=1, tp_size=16, pp_size=1, zero_stage=ZeroStage.OS, micro_batch_size=1, recompute=Recompute.FULL, sequence_parallel=True)
    notes = [n for n in export_plan(PlanToExport(model, training, wide, 16), fmt).notes if "KV heads" in n]
    assert len(notes) == 1 and notes[0].startswith(f"tp 16 is wider than the model's 8 KV heads: {framework}")
    assert ("Megatron-core 0.16.0" in notes[0]) is subshards and ("needs tp to divide 8" in notes[0]) is not subshards
    within = dataclasses.replace(wide, tp_size=8, dp_size=2)
    assert not [n for n in export_plan(PlanToExport(model, training, within, 16), fmt).notes if "KV heads" in n]
