"""Megatron-core's per-module selective recomputation and DeepSeek-V3's multi-token prediction
(issue 16): what each recompute module drops from a layer's kept activations, by the tensors
Megatron-core saves (NVIDIA/Megatron-LM 8f1c2f8ae53b4e3f32c0ae7f397d8b38a675eaa2, the commit
Megatron-Bridge df0289c pins), and what the MTP module weighs and costs on the last stage."""

from __future__ import annotations

import dataclasses

import pytest

import catalog
from bench.accuracy import _model_for, load_inputs, load_moe_records, record_settings
from solver.cost.analytic import analytic_profile
from solver.cost.compute import bytes_per_element
from solver.cost.flops import active_parameter_count, mtp_parameter_count, total_parameter_count
from solver.cost.moe import EXPERT_LOAD_FACTOR
from solver.cost.profile import ProfileShape
from solver.spec.errors import SpecError
from solver.spec.training import Precision, RecomputeModule, TrainingSpec

DEEPSEEK = catalog.get_model("deepseek-v3")
TOKENS = 4096  # one sequence of DeepSeek-V3's pre-training length, micro-batch 1, tp 1
SHAPE = ProfileShape(tp_size=1, micro_batch_size=1, ep_size=8)


def _cluster():
    node = catalog.get_entry("nodes", "hgx-b200")
    return catalog.cluster_spec_from_dict({**node, "num_nodes": 1})


def _training(precision: str = "mxfp8", modules: tuple[str, ...] = ("core_attn",)) -> TrainingSpec:
    facts = catalog.get_stack_facts("megatron-core-2024")
    return TrainingSpec(
        global_batch_size=64, seq_length=TOKENS, precision=Precision(precision),
        recompute_modules=tuple(RecomputeModule(m) for m in modules), **facts,
    )


def _layers(model, training):
    profile = analytic_profile(model, _cluster(), training, SHAPE)
    dense, moe = profile.layers[1], profile.layers[1 + model.first_dense_layers]
    return dense, moe, profile.head


def test_mtp_module_has_deepseek_v3s_published_parameter_count():
    """README_WEIGHTS.md of deepseek-ai/DeepSeek-V3: the main model is 671B (37B activated); the
    MTP module '11.5B unique parameters (excluding the shared 0.9B Embedding and 0.9B output
    Head)', which the model card rounds, with them, to 14B (685B in all)."""
    assert DEEPSEEK.mtp_num_layers == 1
    assert total_parameter_count(DEEPSEEK) / 1e9 == pytest.approx(671.0, abs=0.1)
    assert active_parameter_count(DEEPSEEK) / 1e9 == pytest.approx(37.6, abs=0.1)
    assert mtp_parameter_count(DEEPSEEK) / 1e9 == pytest.approx(11.5, rel=0.015)
    shared = 2 * DEEPSEEK.vocab_size * DEEPSEEK.hidden_size
    assert shared / 1e9 == pytest.approx(1.85, abs=0.01)  # 0.9B + 0.9B
    assert (total_parameter_count(DEEPSEEK) + mtp_parameter_count(DEEPSEEK)) / 1e9 == pytest.approx(685 - 2, abs=1)
    assert mtp_parameter_count(dataclasses.replace(DEEPSEEK, mtp_num_layers=0)) == 0
    with pytest.raises(SpecError, match="mtp_num_layers"):
        dataclasses.replace(DEEPSEEK, mtp_num_layers=-1)


def test_mtp_module_runs_on_the_head_as_one_more_moe_layer_and_output_head():
    training = _training()
    _, moe, head = _layers(DEEPSEEK, training)
    _, _, plain_head = _layers(dataclasses.replace(DEEPSEEK, mtp_num_layers=0), training)
    h = DEEPSEEK.hidden_size
    assert head.parameter_count - plain_head.parameter_count == moe.parameter_count + 2 * h * h + 3 * h
    assert head.expert_parameter_count == moe.expert_parameter_count  # its experts shard over the expert-DP ranks
    # Its layer's work, all-to-alls and kept activations, and the output head's GEMM once more.
    assert head.forward_s > plain_head.forward_s * 2 + moe.forward_s * 0.99
    assert head.ep_comm_s == pytest.approx(moe.ep_comm_s)
    assert head.selective_activation_bytes > plain_head.selective_activation_bytes + moe.selective_activation_bytes


def test_mla_up_proj_frees_the_up_projected_query_key_and_value():
    """multi_latent_attention.py: CheckpointWithoutOutput over qkv_up_proj_and_rope_apply, output
    discarded after the attention core: H x (2 x 192 + 128) 16-bit elements per token, 512 MiB
    per layer for a 4096-token sequence of DeepSeek-V3, and the two up projections again."""
    dense, moe, _ = _layers(DEEPSEEK, _training(modules=("core_attn",)))
    dense_up, moe_up, _ = _layers(DEEPSEEK, _training(modules=("mla_up_proj",)))
    freed = 2 * TOKENS * 128 * (2 * 192 + 128)
    assert freed == 512 * 2**20
    for before, after in ((dense, dense_up), (moe, moe_up)):
        assert before.selective_activation_bytes - after.selective_activation_bytes == freed
        assert after.activation_bytes == before.activation_bytes  # nothing changes without recompute
        assert after.selective_recompute_s > before.selective_recompute_s


def test_moe_act_frees_the_experts_fc2_inputs():
    """experts.py: activation_checkpoint = CheckpointWithoutOutput() around the activation, its
    output (fc2's saved input, MXFP8 1 + 1/32 bytes per element) discarded: tokens x k x capacity
    x moe_ffn elements on the busiest rank."""
    _, moe, _ = _layers(DEEPSEEK, _training())
    dense_act, moe_act, _ = _layers(DEEPSEEK, _training(modules=("moe_act",)))
    routed = TOKENS * DEEPSEEK.experts_per_token * EXPERT_LOAD_FACTOR
    freed = moe.selective_activation_bytes - moe_act.selective_activation_bytes
    assert freed == pytest.approx((1 + 1 / 32) * routed * DEEPSEEK.moe_ffn_hidden_size, abs=1)
    assert dense_act.selective_activation_bytes == _layers(DEEPSEEK, _training())[0].selective_activation_bytes


def test_layernorm_and_mlp_modules():
    """layernorm: the input and pre-MLP norm outputs the GEMMs keep (2 x g x h per token); mlp:
    a dense layer's MLP from its input (SwiGLU's gate and up, 4 bytes, and the down projection's
    input, g, per inner element), and not an MoE layer's (transformer_layer.py 'if not
    self.is_moe_layer')."""
    g = bytes_per_element(Precision.MXFP8)
    dense, moe, _ = _layers(DEEPSEEK, _training())
    dense_ln, moe_ln, _ = _layers(DEEPSEEK, _training(modules=("layernorm",)))
    for before, after in ((dense, dense_ln), (moe, moe_ln)):
        assert before.selective_activation_bytes - after.selective_activation_bytes == int(2 * g * TOKENS * DEEPSEEK.hidden_size)
    dense_mlp, moe_mlp, _ = _layers(DEEPSEEK, _training(modules=("mlp",)))
    assert dense.selective_activation_bytes - dense_mlp.selective_activation_bytes == int((4 + g) * TOKENS * DEEPSEEK.ffn_hidden_size)
    assert moe_mlp.selective_activation_bytes == moe.selective_activation_bytes


def test_moe_layer_keeps_what_transformer_engine_keeps_per_routed_token():
    """Per token through an expert: fc1's input (h), SwiGLU's input (2 x moe_ffn, 16 bit) and fc2's
    input (moe_ffn); the two GEMM inputs in MXFP8 where Transformer Engine keeps them so."""
    h, fe, f = DEEPSEEK.hidden_size, DEEPSEEK.moe_ffn_hidden_size, DEEPSEEK.ffn_hidden_size
    routed = TOKENS * DEEPSEEK.experts_per_token * EXPERT_LOAD_FACTOR
    for precision in ("bf16", "mxfp8"):
        g = bytes_per_element(Precision(precision))
        dense, moe, _ = _layers(DEEPSEEK, _training(precision))
        shared = DEEPSEEK.num_shared_experts * fe
        expected = (4 + g) * (routed * fe + TOKENS * shared - TOKENS * f) + g * routed * h + g * TOKENS * h
        assert moe.activation_bytes - dense.activation_bytes == pytest.approx(expected, abs=2)


def test_recompute_modules_are_megatron_cores_names():
    assert [m.value for m in RecomputeModule] == ["core_attn", "mla_up_proj", "layernorm", "mlp", "moe_act"]
    assert TrainingSpec(8, 128).recompute_modules == (RecomputeModule.CORE_ATTN,)
    with pytest.raises(SpecError, match="training.recompute_modules"):
        TrainingSpec(8, 128, recompute_modules=("attention",))


def test_bench_runs_say_which_modules_they_recompute_and_whether_they_train_mtp():
    inputs = load_inputs()
    modules, mtp = {}, {}
    for record in load_moe_records():
        settings = record_settings(record, inputs)
        modules[record["id"]] = tuple(settings.get("recompute_modules", ()))
        model = _model_for(record, settings)
        if record["model"]["catalog"] == "deepseek-v3":
            mtp[record["id"]] = model.mtp_num_layers
    assert modules["moe-mbridge2509-h100-deepseek-v3-1024gpu-fp8"] == ("mla_up_proj", "mlp")
    # Sec 3.2.3 (RMSNorm, MLA up-projections) and Sec 3.3.3 (the MoE SwiGLU's output, from its cached input).
    assert modules["moe-deepseekv3-report-2048gpu"] == ("layernorm", "mla_up_proj", "moe_act")
    assert modules["moe-mbridge2602-gb300-deepseek-v3-256gpu-mxfp8"] == ("mla_up_proj",)
    assert {run for run, depth in mtp.items() if depth == 0} == {run for run in mtp if "wo-mtp" in run}
