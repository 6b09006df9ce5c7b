"""FP8 attention (``training.fp8_attention``) and the MXFP8 output projection
(``training.fp8_output_proj``, below). FP8 attention: Transformer Engine's fp8_dpa, which megatron-core
hands to its FP8 and MXFP8 recipes from TransformerConfig.fp8_dot_product_attention
(megatron/core/fp8_utils.py) and Megatron-Bridge's 26.08 MXFP8 recipes turn on
(mixed_precision.fp8_dot_product_attention). cuDNN's FP8 fused attention runs Q K^T and P V in FP8
after casting Q, K and V (and the output gradient backward); the softmax's exponentials do not
change."""

from __future__ import annotations

import dataclasses

import pytest

import catalog
from bench.accuracy import _model_for, evaluate_bench, load_inputs, load_mbridge2608_records, record_settings, training_for
from conftest import assert_problem, error_fields
from solver.cost.analytic import (
    FP8_ATTENTION_CAST_BYTES,
    FUSED,
    QUANTISATION,
    _attention_core_s,
    analytic_profile,
    flash_exponential_s,
    fp8_attention_cast_s,
)
from solver.cost.compute import elementwise_time_s, gemm_time_s
from solver.cost.profile import ProfileShape
from solver.frameworks import ExportFormat, PlanToExport, export_plan
from solver.spec.errors import SpecError
from solver.spec.parallel import ParallelConfig
from solver.spec.training import Precision, Recompute, TrainingSpec, ZeroStage

MODEL = "llama3-8b"  # 32 query heads, 8 KV heads of 128, hidden 4096


def _cluster():
    return catalog.cluster_spec_from_dict(catalog.node_cluster_entry("hgx-b200", 8))


def test_every_stack_leaves_it_off_and_says_why():
    stacks = catalog.list_entries("stacks")
    assert {entry["facts"]["fp8_attention"] for entry in stacks} == {False}
    sources = {entry["name"]: entry["sources"]["fp8_attention"] for entry in stacks}
    assert "fp8_dot_product_attention" in sources["megatron-core-2024"] and "fp8_dpa" in sources["megatron-core-2024"]
    assert "linear layers only" in sources["torchtitan-2025"]


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"precision": Precision.BF16}, "set training.precision to fp8 or mxfp8"),
        ({"precision": Precision.NVFP4}, "set training.precision to fp8 or mxfp8"),
        ({"precision": Precision.MXFP8, "flash_attention": False}, "needs training.flash_attention true"),
        ({"precision": Precision.MXFP8, "fp8_attention": "yes"}, "must be true or false"),
    ],
)
def test_it_runs_only_on_an_fp8_recipe_and_fused_attention(overrides, reason):
    with pytest.raises(SpecError) as refused:
        TrainingSpec(64, 4096, **{"fp8_attention": True, **overrides})
    assert refused.value.field == "training.fp8_attention" and reason in str(refused.value)
    assert TrainingSpec(64, 4096, Precision.FP8, fp8_attention=True).fp8_attention


def test_the_attention_gemms_run_at_the_fp8_rate_and_the_exponentials_do_not_change():
    """Forward: causal half of the two block GEMMs per head at FP8, plus one exponential per score;
    backward: 2.5 x the GEMMs plus the exponentials again (FlashAttention-2's recomputed P)."""
    model, gpu = catalog.get_model(MODEL), _cluster().gpu
    heads, s = 1 * 32 / 1, 4096
    for fp8, precision in ((False, Precision.BF16), (True, Precision.FP8)):
        training = TrainingSpec(64, s, Precision.MXFP8, fp8_attention=fp8)
        forward_s, backward_s, _ = _attention_core_s(model, gpu, training, heads, s, FUSED)
        blocks_s = gemm_time_s(gpu, precision, s, s, 128, heads) + gemm_time_s(gpu, precision, s, 128, s, heads)
        causal = model.causal_score_fraction(s)
        exp_s = flash_exponential_s(gpu, causal * heads * s * s)
        assert forward_s == pytest.approx(causal * blocks_s + exp_s)
        assert backward_s == pytest.approx(2.5 * causal * blocks_s + exp_s)
    bf16 = _attention_core_s(model, gpu, TrainingSpec(64, s, Precision.MXFP8), heads, s, FUSED)
    fp8 = _attention_core_s(model, gpu, TrainingSpec(64, s, Precision.MXFP8, fp8_attention=True), heads, s, FUSED)
    assert fp8[0] < bf16[0] and fp8[1] < bf16[1]


def test_q_k_v_are_cast_forward_and_the_output_gradient_backward():
    model, cluster = catalog.get_model(MODEL), _cluster()
    tokens, t = 2 * 4096, 2
    forward_s, backward_s = fp8_attention_cast_s(model, cluster.gpu, tokens, t)
    qkv = 32 * 128 + 2 * 8 * 128
    assert forward_s == pytest.approx(elementwise_time_s(cluster.gpu, FP8_ATTENTION_CAST_BYTES * tokens * qkv / t, kernels=3))
    assert backward_s == pytest.approx(elementwise_time_s(cluster.gpu, FP8_ATTENTION_CAST_BYTES * tokens * 32 * 128 / t, kernels=1))
    # The layer: what the attention core saves, less the casts.
    shape = ProfileShape(t, 2, True)
    base = TrainingSpec(64, 4096, Precision.MXFP8)
    plain = analytic_profile(model, cluster, base, shape).transformer_layers[0]
    fast = analytic_profile(model, cluster, dataclasses.replace(base, fp8_attention=True), shape).transformer_layers[0]
    core_bf16 = _attention_core_s(model, cluster.gpu, base, 2 * 32 / t, 4096, FUSED)
    core_fp8 = _attention_core_s(model, cluster.gpu, dataclasses.replace(base, fp8_attention=True), 2 * 32 / t, 4096, FUSED)
    assert fast.forward_s == pytest.approx(plain.forward_s - core_bf16[0] + core_fp8[0] + forward_s)
    assert fast.backward_s == pytest.approx(plain.backward_s - core_bf16[1] + core_fp8[1] + backward_s)


def test_latent_attention_casts_every_heads_up_projected_k_and_v():
    model, gpu = catalog.get_model("deepseek-v3"), _cluster().gpu
    forward_s, backward_s = fp8_attention_cast_s(model, gpu, 4096, 1)
    heads = model.num_attention_heads
    qkv = heads * (2 * model.qk_head_width + model.v_head_width)  # 128 x (2 x 192 + 128)
    assert qkv == 128 * 512
    assert forward_s == pytest.approx(elementwise_time_s(gpu, FP8_ATTENTION_CAST_BYTES * 4096 * qkv, kernels=3))
    assert backward_s == pytest.approx(elementwise_time_s(gpu, FP8_ATTENTION_CAST_BYTES * 4096 * heads * model.v_head_width, kernels=1))


def _body(**training) -> dict:
    return {
        "model": MODEL, "cluster": "hgx-b200", "num_gpus": 8,
        "training": {"global_batch_size": 64, "seq_length": 8192, "precision": "mxfp8", "stack": "megatron-core-2024", **training},
        "parallel": {"dp_size": 8, "tp_size": 1, "pp_size": 1, "zero_stage": 1, "micro_batch_size": 1, "recompute": "none"},
    }


def test_the_api_costs_it_and_refuses_it_without_an_fp8_recipe(api):
    plain = api.post("/v1/evaluations", json=_body())
    fast = api.post("/v1/evaluations", json=_body(fp8_attention=True))
    assert plain.status_code == 200 and fast.status_code == 200, (plain.text, fast.text)
    assert fast.json()["prediction"]["step_time_s"] < plain.json()["prediction"]["step_time_s"]
    refused = api.post("/v1/evaluations", json=_body(fp8_attention=True, precision="bf16"))
    assert "training.fp8_attention" in " ".join(error_fields(assert_problem(refused, 422)))
    bad = api.post("/v1/evaluations", json=_body(fp8_attention="yes"))
    assert "body.training.fp8_attention" in error_fields(assert_problem(bad, 422))
    stack = api.get("/v1/catalog/stacks/megatron-core-2024").json()
    assert stack["facts"]["fp8_attention"] is False and "fp8_dpa" in stack["sources"]["fp8_attention"]


def _plan(**training) -> PlanToExport:
    parallel = ParallelConfig(dp_size=8, tp_size=1, pp_size=1, zero_stage=ZeroStage.OS, micro_batch_size=1, recompute=Recompute.NONE)
    return PlanToExport(catalog.get_model(MODEL), TrainingSpec(64, 8192, Precision.MXFP8, **training), parallel, 8)


def test_nemo_writes_it_and_the_other_exports_say_they_run_attention_in_16_bit():
    nemo = export_plan(_plan(fp8_attention=True), ExportFormat.NEMO)
    assert nemo.exact and "fp8_dot_product_attention: true" in nemo.files[0].text
    assert "fp8_dot_product_attention" not in export_plan(_plan(), ExportFormat.NEMO).files[0].text
    for fmt, says in (
        (ExportFormat.MEGATRON, "no command-line flag"),
        (ExportFormat.TORCHTITAN, "linear layers only"),
        (ExportFormat.DEEPSPEED, "Megatron-DeepSpeed has no FP8 attention kernel"),
    ):
        exported = export_plan(_plan(fp8_attention=True), fmt)
        (difference,) = [d for d in exported.differences if d.field == "training.fp8_attention"]
        assert (difference.planned, difference.exported) == ("true", "false") and says in difference.reason
        assert not exported.exact and exported.training.fp8_attention is False
        assert not [d for d in export_plan(_plan(), fmt).differences if d.field == "training.fp8_attention"]


def test_the_26_08_recipes_that_set_it_are_costed_with_it():
    """Megatron-Bridge's 26.08 full-iteration MXFP8 recipes set fp8_dot_product_attention on every
    row but the GB200 DeepSeek-V3 one (_enable_deepseek_full_iteration_mxfp8's default False)."""
    inputs = load_inputs()
    for record in load_mbridge2608_records():
        settings = record_settings(record, inputs)
        training = training_for(record, settings, _model_for(record, settings))
        assert training.fp8_attention is (record["id"] != "moe-mbridge2608-gb200-deepseek-v3-256gpu-mxfp8")
    results = {r.run_id: r for r in evaluate_bench() if r.run_id.startswith("moe-mbridge2608-")}
    # The Qwen3 rows, whose recipes run FP8 attention, read within 6% with it.
    assert all(abs(r.error) < 0.06 for rid, r in results.items() if "qwen3" in rid)


# The MXFP8 output projection (``training.fp8_output_proj``): Megatron-core's
# TransformerConfig.fp8_output_proj (NVIDIA/Megatron-LM #4825, --fp8-output-proj), the logits GEMM
# under the MXFP8 autocast; it requires fp8_recipe 'mxfp8'.


@pytest.mark.parametrize("precision", [Precision.BF16, Precision.FP8, Precision.NVFP4])
def test_the_mxfp8_output_projection_needs_the_mxfp8_recipe(precision):
    with pytest.raises(SpecError) as refused:
        TrainingSpec(64, 4096, precision, fp8_output_proj=True)
    assert refused.value.field == "training.fp8_output_proj" and "set training.precision to mxfp8" in str(refused.value)
    assert TrainingSpec(64, 4096, Precision.MXFP8, fp8_output_proj=True).fp8_output_proj


def test_the_logits_gemm_runs_in_mxfp8_and_quantises_its_input_and_the_logits_gradient():
    model, cluster = catalog.get_model(MODEL), _cluster()
    gpu, t, tokens, vocab, h = cluster.gpu, 2, 2 * 4096, model.vocab_size, model.hidden_size
    shape = ProfileShape(t, 2, True)
    base = TrainingSpec(64, 4096, Precision.MXFP8)
    plain = analytic_profile(model, cluster, base, shape).head
    fast = analytic_profile(model, cluster, dataclasses.replace(base, fp8_output_proj=True), shape).head
    gemm_bf16 = gemm_time_s(gpu, Precision.BF16, tokens, vocab / t, h)
    gemm_mxfp8 = gemm_time_s(gpu, Precision.MXFP8, tokens, vocab / t, h)
    quantise = QUANTISATION[Precision.MXFP8].bytes_per_element
    assert fast.forward_s == pytest.approx(plain.forward_s - gemm_bf16 + gemm_mxfp8 + elementwise_time_s(gpu, quantise * tokens * h, kernels=1))
    assert fast.backward_s == pytest.approx(
        plain.backward_s - 2 * (gemm_bf16 - gemm_mxfp8) + elementwise_time_s(gpu, quantise * tokens * vocab / t, kernels=1)
    )
    assert fast.forward_s < plain.forward_s and fast.backward_s < plain.backward_s


def test_the_api_and_the_exports_carry_the_mxfp8_output_projection(api):
    plain = api.post("/v1/evaluations", json=_body())
    fast = api.post("/v1/evaluations", json=_body(fp8_output_proj=True))
    assert fast.status_code == 200, fast.text
    assert fast.json()["prediction"]["step_time_s"] < plain.json()["prediction"]["step_time_s"]
    refused = api.post("/v1/evaluations", json=_body(fp8_output_proj=True, precision="fp8"))
    assert "training.fp8_output_proj" in " ".join(error_fields(assert_problem(refused, 422)))
    megatron = export_plan(_plan(fp8_output_proj=True), ExportFormat.MEGATRON)
    assert megatron.exact and "--fp8-output-proj" in megatron.files[0].text
    assert "--fp8-output-proj" not in export_plan(_plan(), ExportFormat.MEGATRON).files[0].text
    nemo = export_plan(_plan(fp8_output_proj=True), ExportFormat.NEMO)
    assert nemo.exact and "fp8_output_proj: true" in nemo.files[0].text
    for fmt in (ExportFormat.TORCHTITAN, ExportFormat.DEEPSPEED):
        exported = export_plan(_plan(fp8_output_proj=True), fmt)
        (difference,) = [d for d in exported.differences if d.field == "training.fp8_output_proj"]
        assert difference.exported == "false" and "logits GEMM runs in 16 bit" in difference.reason


def test_the_26_08_recipes_that_run_the_mxfp8_head_are_costed_with_it():
    """_enable_deepseek_full_iteration_mxfp8(..., fp8_output_proj=True) and
    _apply_gpt_oss_120b_full_iter_fp8mx_configs set it; the Qwen3 recipes do not."""
    inputs = load_inputs()
    for record in load_mbridge2608_records():
        settings = record_settings(record, inputs)
        training = training_for(record, settings, _model_for(record, settings))
        assert training.fp8_output_proj is ("qwen3" not in record["id"])
