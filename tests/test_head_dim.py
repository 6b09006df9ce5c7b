"""Attention heads that are not hidden_size / num_attention_heads wide (``ModelSpec.head_dim``).

Qwen3-30B-A3B (Qwen/Qwen3-30B-A3B config.json: hidden 2048, 32 query heads and 4 K/V heads of 128,
48 layers, 128 experts of 768, 8 per token) is the case: its Q and attention output are 4096 wide
on a 2048-wide residual stream. The counts are checked against the model card (30.5B parameters,
3.3B activated) in tests/test_hf_config.py; here the cost model's widths, the default's
equivalence, the validation, the exports and the API."""

from __future__ import annotations

import dataclasses

import pytest
from megatron.core.transformer.transformer_config import TransformerConfig
from test_export_frameworks import _file, script_arguments

import catalog
from conftest import assert_problem, node_cluster
from solver.cost.analytic import _block_matmuls, analytic_layers, ring_exchange_bytes
from solver.cost.flops import attention_score_flops, attention_weight_count
from solver.cost.profile import ProfileShape
from solver.frameworks import ExportFormat, PlanToExport, export_plan
from solver.search.loop import search
from solver.search.request import SearchRequest
from solver.spec.errors import SpecError
from solver.spec.model import ModelSpec
from solver.spec.parallel import ParallelConfig
from solver.spec.training import Recompute, TrainingSpec, ZeroStage

QWEN3_30B_A3B = ModelSpec(
    name="qwen3-30b-a3b", num_layers=48, hidden_size=2048, num_attention_heads=32, num_kv_heads=4, head_dim=128,
    ffn_hidden_size=6144, vocab_size=151936, seq_length=40960, mlp_activation="swiglu", tied_embeddings=False,
    position_embedding="none", num_experts=128, experts_per_token=8, moe_ffn_hidden_size=768,
)
TRAINING = TrainingSpec(global_batch_size=512, seq_length=4096)



def test_the_widths_follow_the_heads_not_the_residual_stream():
    h, q, kv = 2048, 32 * 128, 4 * 128
    assert (QWEN3_30B_A3B.q_width, QWEN3_30B_A3B.kv_hidden_size, QWEN3_30B_A3B.head_width) == (q, kv, 128)
    assert attention_weight_count(QWEN3_30B_A3B) == h * q + q * h + 2 * h * kv  # Q and O, then K and V
    assert attention_score_flops(QWEN3_30B_A3B, batch=2, seq_length=4096) == 4.0 * 2 * 4096**2 * q
    # The block's matmuls as torchtitan runs them: wq h -> q, wk and wv h -> kv, wo q -> h.
    assert _block_matmuls(QWEN3_30B_A3B)[:4] == ((h, q, True), (h, kv, True), (h, kv, True), (q, h, False))
    shape = ProfileShape(tp_size=2, micro_batch_size=1, sequence_parallel=True, cp_size=2)
    assert ring_exchange_bytes(QWEN3_30B_A3B, shape, 4096) == 2 * 2 * (4096 // 2) * kv / 2


def test_a_stated_head_dim_equal_to_the_default_is_the_default_model():
    llama = catalog.get_model("llama3-8b")
    stated = dataclasses.replace(llama, head_dim=128)
    assert stated == llama and stated.head_dim is None
    cluster = node_cluster("dgx-h100", 8)
    shape = ProfileShape(tp_size=1, micro_batch_size=1, sequence_parallel=False)
    assert analytic_layers(stated, cluster, TrainingSpec(global_batch_size=64, seq_length=8192), shape) == analytic_layers(
        llama, cluster, TrainingSpec(global_batch_size=64, seq_length=8192), shape)


def test_wider_heads_cost_more_attention_and_keep_more_activations():
    """The same model with heads of 128 against the default 64 (hidden 2048 / 32 heads): Q, K, V and
    the attention output double, so the layer's time and kept bytes grow, the MLP's do not."""
    narrow = dataclasses.replace(QWEN3_30B_A3B, head_dim=None)
    cluster = node_cluster("dgx-h100", 8)
    shape = ProfileShape(tp_size=1, micro_batch_size=1, sequence_parallel=False)
    wide_layer = analytic_layers(QWEN3_30B_A3B, cluster, TRAINING, shape).transformer_layers[0]
    narrow_layer = analytic_layers(narrow, cluster, TRAINING, shape).transformer_layers[0]
    assert wide_layer.forward_s > narrow_layer.forward_s
    assert wide_layer.activation_bytes - narrow_layer.activation_bytes == pytest.approx(
        (2 + 2) * 4096 * (4096 - 2048) + 4 * 4096 * (512 - 256), rel=1e-9)  # Q and out-proj input, K and V
    assert wide_layer.parameter_count - narrow_layer.parameter_count == 2 * 2048 * (4096 - 2048) + 2 * 2048 * (512 - 256)


@pytest.mark.parametrize(
    ("change", "field"),
    [({"head_dim": 0}, "model.head_dim"), ({"head_dim": True}, "model.head_dim"),
     ({"kv_lora_rank": 512, "qk_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}, "model.head_dim")],
)
def test_a_bad_head_dim_names_the_field(change, field):
    with pytest.raises(SpecError) as caught:
        dataclasses.replace(QWEN3_30B_A3B, **change)
    assert caught.value.field == field


def test_a_hidden_size_heads_do_not_divide_is_fine_once_head_dim_is_given():
    model = ModelSpec(name="odd", num_layers=2, hidden_size=2560, num_attention_heads=24, head_dim=128, vocab_size=1000, seq_length=512)
    assert model.q_width == 3072
    with pytest.raises(SpecError, match="give head_dim"):
        ModelSpec(name="odd", num_layers=2, hidden_size=2560, num_attention_heads=24, vocab_size=1000, seq_length=512)


def test_the_search_plans_the_model_and_the_exports_carry_head_dim():
    request = SearchRequest(QWEN3_30B_A3B, node_cluster("dgx-h100", 64), TRAINING, top_k=1)
    best = search(request).candidates[0]
    assert best.evaluation.feasible and best.evaluation.prediction.step_time_s > 0
    plan = PlanToExport(QWEN3_30B_A3B, TRAINING, ParallelConfig(
        dp_size=8, tp_size=2, pp_size=1, zero_stage=ZeroStage.OS, micro_batch_size=1, recompute=Recompute.FULL,
        sequence_parallel=True, ep_size=8), 8)
    _, flags = script_arguments(_file(export_plan(plan, ExportFormat.MEGATRON), "pretrain_gpt.sh").text, "pretrain_gpt.py")
    config = TransformerConfig(num_layers=48, hidden_size=2048, num_attention_heads=32, num_query_groups=int(flags["--num-query-groups"]),
                               kv_channels=int(flags["--kv-channels"]))
    assert config.kv_channels * config.num_attention_heads == QWEN3_30B_A3B.q_width
    _, flags = script_arguments(_file(export_plan(plan, ExportFormat.DEEPSPEED), "launch.sh").text, "pretrain_gpt.py")
    assert flags["--kv-channels"] == "128"
    assert "  kv_channels: 128" in _file(export_plan(plan, ExportFormat.NEMO), "nemo_overrides.yaml").text.splitlines()
    assert any("heads of 128" in note for note in export_plan(plan, ExportFormat.TORCHTITAN).notes)


def test_the_api_takes_head_dim_inline_and_names_a_bad_one(api):
    body = {
        "model": {"name": "q3", "num_layers": 48, "hidden_size": 2048, "num_attention_heads": 32, "num_kv_heads": 4,
                  "head_dim": 128, "ffn_hidden_size": 6144, "vocab_size": 151936, "seq_length": 40960,
                  "mlp_activation": "swiglu", "tied_embeddings": False, "position_embedding": "none",
                  "num_experts": 128, "experts_per_token": 8, "moe_ffn_hidden_size": 768},
        "cluster": "dgx-h100-x8", "training": {"global_batch_size": 512, "seq_length": 4096},
        "parallel": {"dp_size": 64, "tp_size": 1, "pp_size": 1, "zero_stage": 1, "micro_batch_size": 1, "recompute": "full", "ep_size": 8},
    }
    reply = api.post("/v1/evaluations", json=body)
    assert reply.status_code == 200, reply.text
    default = api.post("/v1/evaluations", json={**body, "model": {**body["model"], "head_dim": 64}})
    assert reply.json()["prediction"]["step_time_s"] > default.json()["prediction"]["step_time_s"]
    problem = assert_problem(api.post("/v1/evaluations", json={**body, "model": {**body["model"], "head_dim": 0}}), 422)
    assert problem["errors"][0]["field"] == "body.model.head_dim"
