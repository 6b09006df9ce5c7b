"""What "selective" recompute keeps depends on the stack (``TrainingSpec.selective_recompute``):
Megatron's attention-core recompute (Korthikanti et al. 2022) or torchtitan's per-op policy
(torchtitan/distributed/activation_checkpoint.py: keep the outputs of the matmuls, the SDPA
kernel and reduce-scatter, recomputing every second matmul)."""

from __future__ import annotations

import dataclasses

import pytest

import catalog
from solver.cost.analytic import analytic_profile
from solver.cost.compute import gemm_time_s
from solver.cost.evaluate import evaluate
from solver.cost.profile import ProfileShape
from solver.cost.stage import recompute_working_bytes, working_bytes
from solver.spec.parallel import ParallelConfig
from solver.spec.training import Precision, Recompute, SelectiveRecompute, TrainingSpec, ZeroStage

SEQ = 8192


def _layer(policy: SelectiveRecompute, tp_size: int = 1, micro_batch_size: int = 2):
    model = catalog.get_model("llama3-8b")
    cluster = catalog.get_cluster("dgx-h100-x8")
    training = TrainingSpec(global_batch_size=16, seq_length=SEQ, selective_recompute=policy)
    shape = ProfileShape(tp_size=tp_size, micro_batch_size=micro_batch_size)
    return model, analytic_profile(model, cluster, training, shape).transformer_layers[0]


def test_op_policy_keeps_every_other_matmul_and_the_attention_output():
    """Llama 3 8B (h 4096, 8 KV heads of 128, SwiGLU 14336, 32 heads), tp 1: the block input,
    the outputs of wq, wv, w1 and w2 (matmuls 1, 3, 5, 7 of wq wk wv wo w1 w3 w2), the SDPA
    output, each 16-bit, and the fp32 log-sum-exp per head: 2(4h + kv + f) + 4a bytes a token."""
    model, layer = _layer(SelectiveRecompute.OP)
    h, kv, f, a = 4096, 1024, 14336, 32
    assert (model.hidden_size, model.kv_hidden_size, model.ffn_hidden_size, model.num_attention_heads) == (h, kv, f, a)
    tokens = 2 * SEQ
    assert layer.selective_activation_bytes == tokens * (2 * (4 * h + kv + f) + 4 * a)
    # Less than Megatron's selective (nothing dropped with a fused kernel), more than full.
    _, megatron = _layer(SelectiveRecompute.ATTENTION)
    assert megatron.selective_activation_bytes == megatron.activation_bytes
    assert layer.checkpoint_bytes < layer.selective_activation_bytes < 0.5 * layer.activation_bytes


def test_op_policy_recomputes_the_other_matmuls():
    """wk, wo and w3 (h x kv, h x h, h x f) run again in backward, with every element-wise op:
    more than their share of the forward GEMMs, less than the whole forward."""
    _, layer = _layer(SelectiveRecompute.OP)
    _, megatron = _layer(SelectiveRecompute.ATTENTION)
    h, kv, f = 4096, 1024, 14336
    gpu, tokens = catalog.get_cluster("dgx-h100-x8").gpu, 2 * SEQ
    matmuls_s = sum(gemm_time_s(gpu, Precision.BF16, tokens, n, k) for n, k in ((kv, h), (h, h), (f, h)))
    assert megatron.selective_recompute_s == 0.0  # fused attention: nothing to recompute
    assert matmuls_s < layer.selective_recompute_s < layer.forward_s


def test_tensor_parallel_splits_the_column_parallel_outputs():
    """tp 2: wq, wv, w1 and the attention output are split; the block input (no sequence
    parallelism) and w2's output before its reduction are not."""
    _, layer = _layer(SelectiveRecompute.OP, tp_size=2)
    h, kv, f, a = 4096, 1024, 14336, 32
    tokens = 2 * SEQ
    assert layer.selective_activation_bytes == tokens * (2 * (h + h / 2 + kv / 2 + f / 2 + h / 2 + h) + 4 * a / 2)


def test_selective_working_set_is_charged_once_per_stage():
    """Backward rebuilds what the policy dropped for one layer at a time: the stage's activations
    are the kept bytes of its micro-batches in flight plus one layer's difference and the
    gradients that layer's backward writes beside it."""
    model = catalog.get_model("llama3-8b")
    cluster = catalog.get_cluster("dgx-h100-x8")
    parallel = ParallelConfig(dp_size=8, zero_stage=ZeroStage.OS_G_P, micro_batch_size=2, recompute=Recompute.SELECTIVE)
    training = TrainingSpec(global_batch_size=16, seq_length=SEQ, selective_recompute=SelectiveRecompute.OP)
    evaluation = evaluate(model, cluster, training, parallel, num_gpus=8)
    layer = analytic_profile(model, cluster, training, ProfileShape(micro_batch_size=2)).transformer_layers[0]
    expected = model.num_layers * layer.selective_activation_bytes + working_bytes(layer, Recompute.SELECTIVE)
    assert working_bytes(layer, Recompute.SELECTIVE) == recompute_working_bytes(layer, Recompute.SELECTIVE) + layer.backward_working_bytes
    assert evaluation.stages[0].memory_bytes["activations"] == pytest.approx(expected)
    assert recompute_working_bytes(layer, Recompute.SELECTIVE) == layer.activation_bytes - layer.selective_activation_bytes


def test_stacks_say_what_selective_keeps():
    assert catalog.get_stack_facts("torchtitan-2025")["selective_recompute"] == "op"
    for name in ("megatron-core-2024", "megatron-lm-2021", "megatron-deepspeed-2022"):
        assert catalog.get_stack_facts(name)["selective_recompute"] == "attention", name


def test_op_policy_is_cheaper_in_memory_and_dearer_in_time_than_none():
    """The search weighs it: the op policy's step is slower than no recompute and faster than
    full; its activations lie between."""
    model = catalog.get_model("llama3-8b")
    cluster = catalog.get_cluster("dgx-h100-x8")
    training = TrainingSpec(global_batch_size=16, seq_length=SEQ, selective_recompute=SelectiveRecompute.OP)
    results = {}
    for mode in Recompute:
        parallel = ParallelConfig(dp_size=8, zero_stage=ZeroStage.OS_G_P, micro_batch_size=2, recompute=mode)
        results[mode] = evaluate(model, cluster, training, parallel, num_gpus=8)
    step = {mode: r.prediction.step_time_s for mode, r in results.items()}
    act = {mode: r.stages[0].memory_bytes["activations"] for mode, r in results.items()}
    assert step[Recompute.NONE] < step[Recompute.SELECTIVE] < step[Recompute.FULL]
    assert act[Recompute.FULL] < act[Recompute.SELECTIVE] < act[Recompute.NONE]
    assert dataclasses.replace(training, selective_recompute=SelectiveRecompute.ATTENTION) != training


def test_megatron_bf16_keeps_fp32_main_grads():
    """Megatron-LM's distributed optimizer with bf16 parameters and fp32 gradients holds
    6 + 12/d bytes per parameter (docs/source/distrib_optimizer.md): 2 (bf16 weights) + 4 (fp32
    main_grad) + 12/d (fp32 main weights, Adam's two moments). With fp16 the gradients stay 16 bit,
    and an FSDP stack (fp32 sharded parameters as the master copy) adds up to the ZeRO paper's 16."""
    from solver.cost.stage import state_bytes_per_parameter
    from solver.spec.training import GradReduce

    parallel = ParallelConfig(dp_size=8, zero_stage=ZeroStage.OS)
    megatron = TrainingSpec(global_batch_size=8, seq_length=2048, precision="bf16", grad_reduce=GradReduce.FP32_FOR_BF16)
    assert state_bytes_per_parameter(parallel, megatron) == pytest.approx(6 + 12 / 8)
    fp16 = dataclasses.replace(megatron, precision="fp16")
    assert state_bytes_per_parameter(parallel, fp16) == pytest.approx(4 + 12 / 8)
    fsdp = TrainingSpec(global_batch_size=8, seq_length=2048, grad_reduce=GradReduce.FP32)
    sharded = ParallelConfig(dp_size=8, zero_stage=ZeroStage.OS_G_P)
    assert state_bytes_per_parameter(sharded, fsdp) == pytest.approx(16 / 8)
    assert catalog.get_stack_facts("megatron-lm-2024")["grad_reduce"] == "fp32_for_bf16"


def test_loss_memory_follows_the_stacks_cross_entropy():
    """The head's activations are its peak at the loss, at the start of its backward
    (``analytic.loss_peak_bytes_per_logit``): Megatron's fused fp32 cross entropy keeps 2 + 4
    bytes per logit; torch.compile'd, the 16-bit logits and gradient, 2 + 2; eager fp32
    (torchtitan's loss.py casts to float), log_softmax's output and two fp32 gradients, 4 + 4 + 4;
    eager 16-bit, 2 + 2 + 2. A compiled loss runs eager without fused kernels. Llama 3 8B, 16,384
    tokens a micro-batch, vocabulary 128,256."""
    from solver.cost.analytic import loss_peak_bytes_per_logit
    from solver.spec.training import LossDtype, LossKernel

    for fused in (True, False):
        assert loss_peak_bytes_per_logit(LossDtype.FP32, LossKernel.FUSED, fused) == 6
        assert loss_peak_bytes_per_logit(LossDtype.FP32, LossKernel.EAGER, fused) == 12
        assert loss_peak_bytes_per_logit(LossDtype.HALF, LossKernel.EAGER, fused) == 6
    assert loss_peak_bytes_per_logit(LossDtype.FP32, LossKernel.COMPILED, True) == 4
    assert loss_peak_bytes_per_logit(LossDtype.FP32, LossKernel.COMPILED, False) == 12
    model = catalog.get_model("llama3-8b")
    cluster = catalog.get_cluster("dgx-h100-x8")
    shape = ProfileShape(micro_batch_size=2)
    heads = {}
    for fused in (True, False):
        training = TrainingSpec(global_batch_size=16, seq_length=SEQ, fused_kernels=fused)
        heads[fused] = analytic_profile(model, cluster, training, shape).head.activation_bytes
    logits = 2 * SEQ * model.vocab_size
    assert heads[False] - heads[True] == pytest.approx(8 * logits, abs=1)
    assert catalog.get_stack_facts("torchtitan-2025")["loss_dtype"] == "fp32"
    assert catalog.get_stack_facts("torchtitan-2025")["loss_kernel"] == "compiled"
    assert catalog.get_stack_facts("megatron-core-2024")["loss_kernel"] == "fused"
    assert catalog.get_stack_facts("deepspeed-zero3")["loss_dtype"] == "half"


def test_transformer_engine_keeps_fp8_gemm_inputs():
    """With FP8 GEMMs, Transformer Engine keeps the FP8 cast of each GEMM input for the weight
    gradient (1 byte an element instead of 2); torchao keeps the bf16 input. Llama 3 8B, tp 1:
    the four GEMM inputs are QKV (h), attention out-projection (h), MLP up (h) and MLP down (f),
    so the saving is (3h + f) bytes a token."""
    model = catalog.get_model("llama3-8b")
    cluster = catalog.get_cluster("dgx-h100-x8")
    shape = ProfileShape(micro_batch_size=2)
    kept = {}
    for te in (False, True):
        training = TrainingSpec(global_batch_size=16, seq_length=SEQ, precision="fp8", low_precision_saved_inputs=te)
        kept[te] = analytic_profile(model, cluster, training, shape).transformer_layers[0].activation_bytes
    assert kept[False] - kept[True] == 2 * SEQ * (3 * 4096 + 14336)
    bf16 = TrainingSpec(global_batch_size=16, seq_length=SEQ, low_precision_saved_inputs=True)
    assert analytic_profile(model, cluster, bf16, shape).transformer_layers[0].activation_bytes == kept[False]
    assert catalog.get_stack_facts("megatron-core-2024")["low_precision_saved_inputs"] is True
    assert catalog.get_stack_facts("torchtitan-2025")["low_precision_saved_inputs"] is False
