"""DeepSeek-V3's low-precision storage (arXiv 2412.19437 Sec 3.3.3) as request facts a user can set:
the optimizer's moments in bf16 (``training.moments_dtype``: Megatron-core's precision-aware
optimizer) and the MoE experts' activation-function input cached in FP8
(``training.moe_act_input_dtype``), and the bench rows that state them with the SwiGLU
recomputation of the same paragraph (Megatron-core's ``moe_act`` module). Expected values are worked out here from the definitions:
fp32 master weights (4 bytes) and moments of 4 or 2 bytes each, SwiGLU's gate and up kept at 2 or
1 byte per element."""

from __future__ import annotations

import dataclasses

import pytest

import catalog
from bench.accuracy import _candidates, _cluster_for, _model_for, load_inputs, load_moe_records, record_settings, training_for
from solver.cost.analytic import analytic_profile
from solver.cost.evaluate import evaluate
from solver.cost.memory import (
    GIB_BYTES,
    OPTIMIZER_BYTES_PER_PARAM,
    model_state_bytes,
    optimizer_bytes_per_param,
    optimizer_step_bytes_per_param,
)
from solver.cost.moe import EXPERT_LOAD_FACTOR, moe_mlp_cost
from solver.cost.offload import CPU_OPTIMIZER_BYTES_PER_PARAM, cpu_optimizer_bytes_per_param, host_bytes_per_gpu
from solver.cost.profile import ProfileShape
from solver.spec.dimensions import Offload
from solver.spec.errors import SpecError
from solver.spec.parallel import ParallelConfig
from solver.spec.training import (
    ActInputDtype,
    MomentsDtype,
    OptimizerKind,
    Precision,
    Recompute,
    RecomputeModule,
    TrainingSpec,
    ZeroStage,
)

MASTER = 4  # fp32 master weights
FP32, BF16 = 4, 2  # bytes per moment
DEEPSEEK = catalog.get_model("deepseek-v3")
MIXTRAL = catalog.get_model("mixtral-8x7b")
MEGATRON_CORE = catalog.get_stack_facts("megatron-core-2024")


# --------------------------------------------------------------------------- optimizer moments


def test_optimizer_state_bytes_follow_the_moments_dtype():
    assert optimizer_bytes_per_param(OptimizerKind.ADAM) == MASTER + 2 * FP32 == OPTIMIZER_BYTES_PER_PARAM[OptimizerKind.ADAM] == 12
    assert optimizer_bytes_per_param(OptimizerKind.ADAM, MomentsDtype.BF16) == MASTER + 2 * BF16 == 8
    assert optimizer_bytes_per_param(OptimizerKind.SGD) == MASTER + FP32 == OPTIMIZER_BYTES_PER_PARAM[OptimizerKind.SGD] == 8
    assert optimizer_bytes_per_param(OptimizerKind.SGD, MomentsDtype.BF16) == MASTER + BF16 == 6


@pytest.mark.parametrize("grad_bytes", [2, 4])
def test_model_states_per_parameter_with_bf16_moments_unsharded_and_under_zero_1(grad_bytes):
    """16-bit weights (2), the stack's gradients (2, or Megatron's fp32 main_grad: 4) and Adam's
    fp32 master + two bf16 moments (8): 2 + 4 + 8 = 14 bytes per parameter with fp32 main grads,
    where fp32 moments give 18; ZeRO-1 shards the 8 over the data-parallel ranks."""
    dp = 8
    unsharded = model_state_bytes(1.0, ZeroStage.NONE, dp, OptimizerKind.ADAM, grad_bytes_per_param=grad_bytes, moments=MomentsDtype.BF16)
    assert unsharded == {"weights": 2, "gradients": grad_bytes, "optimizer_states": MASTER + 2 * BF16}
    fp32 = model_state_bytes(1.0, ZeroStage.NONE, dp, OptimizerKind.ADAM, grad_bytes_per_param=grad_bytes)
    assert sum(fp32.values()) - sum(unsharded.values()) == 2 * (FP32 - BF16)
    if grad_bytes == 4:
        assert sum(unsharded.values()) == 14 and sum(fp32.values()) == 18
    zero1 = model_state_bytes(1.0, ZeroStage.OS, dp, OptimizerKind.ADAM, grad_bytes_per_param=grad_bytes, moments=MomentsDtype.BF16)
    assert zero1 == {"weights": 2, "gradients": grad_bytes, "optimizer_states": (MASTER + 2 * BF16) / dp}
    # Under autocast the fp32 parameters are the master copy: the optimizer holds the moments alone.
    autocast = model_state_bytes(1.0, ZeroStage.NONE, dp, OptimizerKind.ADAM, autocast_weights=True, moments=MomentsDtype.BF16)
    assert autocast["optimizer_states"] == 2 * BF16


def test_the_optimizer_step_reads_and_writes_bf16_moments_at_two_bytes():
    # Adam: read master, moments and the 16-bit gradient, write master, moments and the 16-bit
    # weight, read the gradient again for the clipping norm.
    adam = (MASTER + 2 * BF16 + 2) + (MASTER + 2 * BF16 + 2) + 2
    assert optimizer_step_bytes_per_param(OptimizerKind.ADAM, MomentsDtype.BF16) == adam == 22
    assert optimizer_step_bytes_per_param(OptimizerKind.ADAM) == adam + 2 * 2 * (FP32 - BF16) == 30
    assert optimizer_step_bytes_per_param(OptimizerKind.SGD, MomentsDtype.BF16) == 22 - 2 * (FP32 - BF16)
    assert cpu_optimizer_bytes_per_param(OptimizerKind.ADAM, MomentsDtype.BF16) == CPU_OPTIMIZER_BYTES_PER_PARAM[OptimizerKind.ADAM] - 8
    # Offloaded states on the host: the shard's master + moments and its fp32 gradient.
    states = model_state_bytes(1.0, ZeroStage.OS, 4, OptimizerKind.ADAM, moments=MomentsDtype.BF16)["optimizer_states"]
    assert host_bytes_per_gpu(states, OptimizerKind.ADAM, Offload.OPTIMIZER, moments=MomentsDtype.BF16) == pytest.approx((8 + 4) / 4)


def test_bf16_moments_shrink_the_optimizer_states_and_step_and_nothing_else():
    cluster = catalog.get_cluster("dgx-h100-x8")
    parallel = ParallelConfig(dp_size=8, tp_size=8, zero_stage=ZeroStage.OS, micro_batch_size=1, recompute=Recompute.SELECTIVE,
                              sequence_parallel=True)
    model = catalog.get_model("llama2-70b")
    fp32 = TrainingSpec(1024, 4096, **MEGATRON_CORE)
    bf16 = dataclasses.replace(fp32, moments_dtype="bf16")
    before, after = (evaluate(model, cluster, training, parallel, num_gpus=64) for training in (fp32, bf16))
    for ours, theirs in zip(after.stages, before.stages):
        assert ours.memory_bytes.optimizer_states == pytest.approx(theirs.memory_bytes.optimizer_states * (MASTER + 2 * BF16) / (MASTER + 2 * FP32))
        assert (ours.memory_bytes.weights, ours.memory_bytes.gradients, ours.memory_bytes.activations) == (
            theirs.memory_bytes.weights, theirs.memory_bytes.gradients, theirs.memory_bytes.activations)
    assert after.prediction.breakdown_s.optimizer_s < before.prediction.breakdown_s.optimizer_s
    assert after.prediction.breakdown_s.compute_s == before.prediction.breakdown_s.compute_s


def test_a_bad_dtype_is_a_spec_error_naming_the_field():
    with pytest.raises(SpecError, match="training.moments_dtype"):
        TrainingSpec(8, 128, moments_dtype="fp16")
    with pytest.raises(SpecError, match="training.moe_act_input_dtype"):
        TrainingSpec(8, 128, moe_act_input_dtype="fp4")


# --------------------------------------------------------------------------- the experts' SwiGLU input


@pytest.mark.parametrize("model, ep, tp", [(DEEPSEEK, 64, 1), (DEEPSEEK, 8, 2), (MIXTRAL, 8, 1)])
def test_the_swiglu_input_kept_at_one_byte_halves_that_term_exactly(model, ep, tp):
    """SwiGLU's gate and up, routed and shared experts': 2 x 2 bytes per inner element at 16 bits,
    2 x 1 in FP8; nothing else the MoE MLP keeps moves."""
    cluster, tokens = catalog.get_cluster("dgx-h100-x8"), 4096
    half = moe_mlp_cost(model, cluster, Precision.FP8, tokens, tp, ep, 1.0)
    fp8 = moe_mlp_cost(model, cluster, Precision.FP8, tokens, tp, ep, 1.0, act_input_bytes=1)
    inner = tokens * model.experts_per_token * EXPERT_LOAD_FACTOR * model.moe_ffn_hidden_size + tokens * model.num_shared_experts * model.moe_ffn_hidden_size
    act_input_term = 2 * 2 * inner / tp  # gate and up, 16 bit
    assert half.kept_bytes - fp8.kept_bytes == pytest.approx(act_input_term / 2, rel=1e-12)
    assert fp8.act_output_bytes == half.act_output_bytes and fp8.elementwise_bytes == half.elementwise_bytes
    assert fp8.gemm_forward_s == half.gemm_forward_s


def test_the_fp8_act_input_leaves_dense_layers_and_dense_models_alone():
    cluster = catalog.get_cluster("dgx-h100-x8")
    shape = ProfileShape(tp_size=1, micro_batch_size=1, ep_size=8)
    half = TrainingSpec(64, 4096, precision="fp8", **MEGATRON_CORE)
    fp8 = dataclasses.replace(half, moe_act_input_dtype=ActInputDtype.FP8)
    ours, theirs = (analytic_profile(DEEPSEEK, cluster, training, shape) for training in (fp8, half))
    for mine, other in zip(ours.layers, theirs.layers):
        if mine.expert_parameter_count and mine.name.startswith("layer"):
            assert mine.activation_bytes < other.activation_bytes
        elif mine.name.startswith("layer"):
            assert mine == other  # DeepSeek-V3's first three, dense layers
    dense = catalog.get_model("llama2-70b")
    dense_shape = ProfileShape(tp_size=8, micro_batch_size=1, sequence_parallel=True)
    assert analytic_profile(dense, cluster, fp8, dense_shape) == analytic_profile(dense, cluster, half, dense_shape)


# --------------------------------------------------------------------------- the DeepSeek-V3 report row


def _report_row():
    inputs = load_inputs()
    record = next(r for r in load_moe_records() if r["id"] == "moe-deepseekv3-report-2048gpu")
    settings = record_settings(record, inputs)
    model = _model_for(record, settings)
    training = training_for(record, settings, model, padded=False)
    parallel = next(iter(_candidates(record, settings, model, training.global_batch_size)))
    return settings, model, _cluster_for(record, settings), training, parallel, record["cluster"]["gpus"]


def test_the_report_row_states_the_sec_3_3_3_storage():
    settings, _, _, training, _, _ = _report_row()
    assert training.moments_dtype is MomentsDtype.BF16 and training.moe_act_input_dtype is ActInputDtype.FP8
    assert RecomputeModule.MOE_ACT in training.recompute_modules
    assert training.grad_bytes_per_param == 4  # gradients for batch accumulation stay FP32
    assert "Sec 3.3.3" in settings["why"] and "cache the inputs of the SwiGLU operator" in settings["why"]


def test_the_report_row_fits_the_h800_with_its_peak_per_stage():
    """1F1B's memory (DualPipe's 2x parameters and PP + 1 micro-batches are docs/wip's patch): with
    the SwiGLU input kept in FP8 and its output recomputed, bf16 moments and fp32 gradients, the
    first stage (the embedding's fp32 gradients, 16 micro-batches) peaks at 61.8 GiB of the H800's
    79.6 and the second (15 micro-batches of 4 MoE layers) at 58.8; without any of the four the
    second was the busiest, at 72.7. (66.0, 62.3 and 76.1 before DeepSeek-V3's dropout, 0 in its
    config.json, stopped being charged as Megatron-LM's default masks.)"""
    _, model, cluster, training, parallel, gpus = _report_row()
    assert parallel.micro_batch_size == 1
    ev = evaluate(model, cluster, training, parallel, num_gpus=gpus)
    peaks = [stage.memory_bytes.peak_bytes / GIB_BYTES for stage in ev.stages]
    assert ev.feasible and max(peaks) < cluster.gpu.memory_bytes / GIB_BYTES
    assert max(peaks) == pytest.approx(peaks[0]) and peaks[0] == pytest.approx(61.8, abs=0.05)
    assert peaks[1] == pytest.approx(58.8, abs=0.05)
    without = dataclasses.replace(
        training, moments_dtype="fp32", moe_act_input_dtype="half", grad_reduce="half",
        recompute_modules=tuple(m for m in training.recompute_modules if m is not RecomputeModule.MOE_ACT),
    )
    before = [stage.memory_bytes.peak_bytes / GIB_BYTES for stage in evaluate(model, cluster, without, parallel, num_gpus=gpus).stages]
    assert max(before) == pytest.approx(before[1]) and before[1] == pytest.approx(72.7, abs=0.05)


def test_the_megatron_bridge_deepseek_rows_keep_bf16_moments():
    inputs = load_inputs()
    source = inputs["sources"]["moe-mbridge"]
    assert source["moments_dtype"] == "bf16" and "exp_avg_dtype" in source["why"]
    for record in load_moe_records():
        settings = record_settings(record, inputs)
        if settings["family"] == "mbridge-moe":
            assert training_for(record, settings, _model_for(record, settings)).moments_dtype is MomentsDtype.BF16
