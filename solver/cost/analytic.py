"""The analytic per-layer profile: what each layer costs, derived from the model's shape and the
GPU, for one micro-batch on one GPU of a tensor-parallel group.

Sources:
- GEMM shapes and tensor-parallel split: Shoeybi et al. 2019 (Megatron-LM), Narayanan et al. 2021
  Sec 3.2 (4 all-reduces of b*s*h per layer per micro-batch; scatter/gather p2p of b*s*h/t).
- Activation bytes kept for backward: Korthikanti et al. 2022 Sec 4 and Table 2
  (s*b*h*(10 + 24/t + 5*a*s/(h*t)) with TP; /t on everything with sequence parallelism;
  5*a*s^2*b dropped by selective recompute; 2*s*b*h per layer under full recompute), generalised
  here to grouped-query attention (K and V of kv_hidden width) and SwiGLU (three ffn-wide tensors);
  a squared-ReLU MLP (Nemotron) costs and keeps what a GELU one does: two GEMMs h -> ffn -> h, and
  relu(x)^2's backward (2 relu(x) dy) needs its input x, as GELU's does.
- Fused attention (Dao et al. 2022, FlashAttention): no s x s tensor reaches HBM; the backward pass
  recomputes the scores, which FlashAttention-2 (Dao 2023, Sec 4) runs at ~2.5x the forward time.
  Causal masking lets the fused kernel skip half of the score blocks.
- Context parallelism (cp ranks per sequence; Megatron-core with Transformer Engine's
  ``AttnFuncWithCPAndKVP2P``, torchtitan's ``context_parallel``, after Liu et al. 2023, Ring
  Attention): each rank holds s/cp tokens of every sequence, so every GEMM, element-wise kernel,
  TP collective and kept activation is that of b*s/cp tokens. Attention lets those queries see
  all s keys: the K and V chunks go round the ring in cp steps (the local one, then cp - 1
  received), each an (s/cp) x (s/cp) block of scores; with the two-chunk split (rank r holds
  chunks r and 2cp - 1 - r of 2cp) every causal step computes half of its block, so each rank
  does 1/cp of the causal attention work.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from solver.cost.comm import all_reduce_s, cp_link, overlapped_exposed_s, ring_exchange_s, tp_link
from solver.cost.compute import bytes_per_element, elementwise_time_s, gemm_time_s
from solver.cost.flops import (
    attention_score_flops,
    embedding_parameter_count,
    head_parameter_count,
    largest_layer_tensor_count,
    layer_forward_gemm_flops,
    layer_parameter_count,
    logits_forward_flops,
    mtp_layer_is_moe,
    predicted_tokens,
)
from solver.cost.mla import MlaCost, mla_cost
from solver.cost.moe import MoeMlpCost, ep_comm_exposed_s, moe_mlp_cost
from solver.cost.profile import LayerKind, LayerProfile, ModelProfile, Origin, ProfileShape
from solver.spec.hardware import ClusterSpec, GpuSpec
from solver.spec.model import Architecture, MlpActivation, ModelSpec
from solver.spec.training import (
    ActInputDtype,
    FlashKernel,
    LossDtype,
    LossKernel,
    Precision,
    RecomputeModule,
    SelectiveRecompute,
    SpSavedInput,
    TrainingSpec,
)

BYTES_16BIT = 2
BYTES_FP32 = 4
# Bytes per element an MoE layer's experts keep their activation function's input in
# (TrainingSpec.moe_act_input_dtype): fc1's 16-bit output, or DeepSeek-V3's FP8 copy (arXiv
# 2412.19437 Sec 3.3.3; one byte per element, its 1x128 tiles' scales left out).
MOE_ACT_INPUT_BYTES = {ActInputDtype.HALF: BYTES_16BIT, ActInputDtype.FP8: 1}
BACKWARD_TO_FORWARD = 2.0  # dgrad + wgrad GEMMs, each as costly as the forward GEMM
# Element-wise backward kernels read the saved input and the incoming gradient and write one
# gradient: three tensor passes against the forward's two.
ELEMENTWISE_BACKWARD_TO_FORWARD = 1.5

FLASH_BACKWARD_TO_FORWARD = 2.5  # FlashAttention-2 (Dao 2023): backward recomputes the scores
# FlashAttention 1.x and its Triton port against FlashAttention-2, forward and backward together:
# flash-attn's changelog heads the rewrite that upgrades 1.x to FlashAttention-2 "2.0: Complete
# rewrite, 2x faster" (Dao-AILab/flash-attention README), and the Triton port's docstring
# (flash_attn/flash_attn_triton.py, the file llm-foundry vendors) finds its "forward + backward
# slightly slower than CUDA forward + backward" of its day, FlashAttention 1.x. So an FA1-class
# kernel takes twice FA2's time (for the Triton port a lower bound: "slightly slower" is not
# counted).
FLASH_V1_TIME_FACTOR = 2.0


@dataclass(frozen=True)
class ElementwiseCost:
    """Forward HBM bytes of a layer's element-wise work, 16-bit tensors (2 bytes per element)."""

    score_bytes: int  # per attention score element (materialised attention only)
    hidden_bytes: int  # per token x hidden element: norms, dropouts, residual adds
    head_copy_bytes: int  # per token x (q + k + v + context) width element: layout copies
    kernels: int  # kernel launches per layer, forward


# Megatron-LM's fused kernels (Shoeybi et al. 2019; Megatron-LM fused_kernels/, fused_bias_gelu,
# fused_bias_dropout_add): one scale-mask-softmax kernel reads and writes the scores (4 bytes),
# dropout reads and writes them plus a 1-byte mask (5); two LayerNorms read and write (2 x 4);
# two bias-dropout-add kernels read 2 tensors, write 1 and a mask (2 x 7). QKV is split into heads
# by a view, no copy.
FUSED = ElementwiseCost(score_bytes=4 + 5, hidden_bytes=8 + 14, head_copy_bytes=0, kernels=8)
# Eager PyTorch, one kernel per operation (NVIDIA DeepLearningExamples BERT modeling.py,
# BertSelfAttention / BertSelfOutput / BertOutput): the scores are scaled, masked, soft-maxed
# and dropped out by four kernels (4 + 4 + 4 + 5 bytes); two LayerNorms (2 x 4); two dropouts
# (2 x 5) and two residual adds (2 x 6); Q, K and V are permuted into heads and the context back
# by copies (torch.matmul cannot fold the permuted batch dimensions): 4 bytes per element.
EAGER = ElementwiseCost(score_bytes=4 + 4 + 4 + 5, hidden_bytes=8 + 10 + 12, head_copy_bytes=4, kernels=12)
# FP8 GEMMs (Transformer Engine) need their operands in FP8: TE's cast_transpose kernel
# (transformer_engine/common/transpose/cast_transpose.cu) reads a 16-bit tensor and writes its FP8
# cast and the FP8 transpose (updating the amax the scaling recipe needs) in one pass: 2 bytes read,
# 1 + 1 written per element. Forward casts each GEMM's input (the transpose feeds the wgrad GEMM);
# backward casts each GEMM's output gradient (dgrad reads the cast, wgrad the transpose). Weights are
# cast once per step and cached over the micro-batches (TE's ``is_first_microbatch``, which
# Megatron-core passes), so they are not charged per micro-batch. These kernels scale with
# (m + n) k, not m n k: they matter most at small hidden sizes (issue 13, mechanism 7).
FP8_CAST_TRANSPOSE_BYTES = 4
FP8_CAST_KERNELS = 4  # one per linear layer, forward and again backward
# Block-scaled formats quantise the same tensors (each GEMM's input forward, its output gradient
# backward; weights once per step), but a block's scale runs along the GEMM's k, so the copy that
# feeds the wgrad GEMM (k = tokens) is quantised again along the other axis, with its own scales,
# instead of being a transpose (Transformer Engine's MXFP8 and NVFP4 recipes quantise "rowwise"
# and "columnwise"). The amax of each block is found in the same pass. Per element of the 16-bit
# tensor:
# - MXFP8 (OCP MX spec v1.0: 32-element blocks, one E8M0 scale each): 2 bytes read, 1 + 1 FP8
#   bytes and 2 x 1/32 scale bytes written, in one kernel per tensor as FP8's cast-transpose.
# - NVFP4 (arXiv 2509.25149: 16-element blocks with an E4M3 scale each, under an FP32 per-tensor
#   scale from the tensor's amax): an amax pass reads the tensor first (2 bytes, one more kernel),
#   then 2 bytes read, 0.5 + 0.5 FP4 bytes and 2 x 1/16 scale bytes written. The recipe's random
#   Hadamard transform of the wgrad operands and stochastic rounding of gradients run inside the
#   quantising kernel and move no further bytes.
# Like FP8's, these kernels scale with (m + n) k, not m n k.
MXFP8_QUANTISE_BYTES = 2 + 2 * (1 + 1 / 32)
NVFP4_QUANTISE_BYTES = 2 + 2 + 2 * (0.5 + 1 / 16)


@dataclass(frozen=True)
class QuantisationCost:
    """What casting one 16-bit tensor to a GEMM precision moves: HBM bytes per element, and kernel
    launches per pass of a layer (its four linear layers' tensors)."""

    bytes_per_element: float
    kernels: int


QUANTISATION = {
    Precision.FP8: QuantisationCost(FP8_CAST_TRANSPOSE_BYTES, FP8_CAST_KERNELS),
    Precision.MXFP8: QuantisationCost(MXFP8_QUANTISE_BYTES, FP8_CAST_KERNELS),
    Precision.NVFP4: QuantisationCost(NVFP4_QUANTISE_BYTES, 2 * FP8_CAST_KERNELS),  # amax pass + quantise
}

# FP8 attention (``TrainingSpec.fp8_attention``): Transformer Engine casts Q, K and V to FP8 before
# cuDNN's FP8 fused attention forward, and the output gradient backward (the output itself returns
# in 16 bit unless fp8_mha; its gradients dQ, dK, dV too): 2 bytes read, 1 written per element.
FP8_ATTENTION_CAST_BYTES = 3

# Cross-entropy over fp32 logits: convert, max, exp-sum and loss passes (~12 bytes per logit) each way.
CROSS_ENTROPY_BYTES = 12


def _quantised(precision: Precision) -> bool:
    """Whether the linear layers' GEMMs run in FP8 or a block-scaled format (``QUANTISATION``)."""
    return precision in QUANTISATION


def _sixteen_bit(precision: Precision) -> Precision:
    """FP8 and the block-scaled formats apply to the linear layers only (Transformer Engine):
    attention and the output layer run in 16 bit."""
    return Precision.BF16 if _quantised(precision) else precision


def layer_with_host_s(gpu_s: float, host_s: float, launch_blocking: bool) -> float:
    """A layer pass's time beside the framework's host work for it (``host_s``, launching its
    kernels and collectives). Launches are asynchronous: the host runs ahead and the pass takes the
    longer of the two. Under CUDA_LAUNCH_BLOCKING=1 every launch returns only once its kernel has
    finished (CUDA Programming Guide, "Asynchronous Concurrent Execution"), so the GPU waits for the
    host between kernels and the two add up. A stack without a measured host time (0) adds
    nothing either way."""
    return gpu_s + host_s if launch_blocking else max(gpu_s, host_s)


def _activation_all_reduce_s(cluster: ClusterSpec, tokens: float, hidden_size: int, tp_size: int) -> float:
    """One all-reduce of a 16-bit tokens x hidden activation over the TP group (0 at tp_size 1)."""
    return all_reduce_s(BYTES_16BIT * tokens * hidden_size, tp_size, tp_link(cluster, tp_size))


def qkv_subshard_gather_s(model: ModelSpec, cluster: ClusterSpec, tokens: float, tp_size: int) -> float:
    """The QKV collectives of tensor parallelism wider than the KV heads (``kv_head_subsharding``;
    0 where tp divides them). Megatron-core all-gathers every rank's 1/tp of the fused QKV
    projection's output over the TP group before slicing out its KV group
    (megatron/core/transformer/attention.py, ``get_query_key_value_tensors``:
    ``all_gather_last_dim_from_tensor_parallel_region``), and backward reduce-scatters the
    gradient of the same tensor: together the volume of one all-reduce of tokens x (q + 2 kv) 16-bit
    values, outside Transformer Engine's overlapped GEMM collectives."""
    if model.num_kv_heads % tp_size == 0:
        return 0.0
    return all_reduce_s(BYTES_16BIT * tokens * (model.q_width + 2 * model.kv_hidden_size), tp_size, tp_link(cluster, tp_size))


def _attention_core_s(
    model: ModelSpec, gpu: GpuSpec, training: TrainingSpec, heads_local: float, s: int, elementwise: ElementwiseCost,
    cp_size: int = 1,
) -> tuple[float, float, float]:
    """(forward, backward, score element-wise forward) seconds of the attention core
    (Q K^T, softmax, times V) of ``heads_local`` heads over ``s`` tokens on one rank of a
    context-parallel group of ``cp_size``: fused (FlashAttention, causal masks skip half the
    blocks; an FA1-class kernel, ``training.flash_kernel``, at FLASH_V1_TIME_FACTOR times
    FlashAttention-2's time) or materialised through HBM. The rank's s/cp queries meet the s keys in cp blocks of
    (s/cp) x (s/cp) (ring attention, see the module docstring); causal, each step computes half
    its block under the two-chunk split (at cp 1: the one s x s block, half of it)."""
    # The two GEMMs of each tile run in 16 bit, or in FP8 where the stack runs FP8 attention (the
    # catalog's FP8 efficiency, one byte per operand element); the exponentials do not change.
    precision16 = Precision.FP8 if training.fp8_attention else _sixteen_bit(training.precision)
    qk, v = model.qk_head_width, model.v_head_width  # head_dim both, unless latent attention widens them
    q = s // cp_size  # this rank's queries, and the keys of each ring step
    block_s = gemm_time_s(gpu, precision16, q, q, qk, heads_local) + gemm_time_s(gpu, precision16, q, v, q, heads_local)
    if training.flash_attention:
        # Half the blocks for a causal mask, fewer in layers with a sliding window (block-sparse
        # skipping: FlashAttention-2's window_size, Transformer Engine's window_size).
        causal = model.causal_score_fraction(s)
        # One exponential per score each pass (forward P = exp(S - m), backward recomputes P),
        # on the SFUs, between the tile's two GEMMs (see flash_exponential_s).
        exp_s = flash_exponential_s(gpu, causal * cp_size * heads_local * q * q)
        forward_s = causal * cp_size * block_s
        generation = FLASH_V1_TIME_FACTOR if training.flash_kernel is FlashKernel.FA1 else 1.0
        return generation * (forward_s + exp_s), generation * (FLASH_BACKWARD_TO_FORWARD * forward_s + exp_s), 0.0
    forward_s = cp_size * block_s
    score_s = elementwise_time_s(gpu, elementwise.score_bytes * heads_local * q * s, kernels=2)
    return forward_s, BACKWARD_TO_FORWARD * forward_s, score_s


def flash_exponential_s(gpu: GpuSpec, scores: float) -> float:
    """Seconds one pass of a fused attention kernel spends on the exponentials of ``scores``
    score elements, one each (FlashAttention-2, Dao 2023, Algorithms 1 and 2: the forward's
    P = exp(S - m) and the backward's recomputed P = exp(S - L)), at the GPU's special function
    unit rate (``GpuSpec.exp_per_s``, MUFU.EX2), charged beside the tile's GEMM time, not hidden
    under it: within a tile the second GEMM (P V; in backward dV and dS) needs the exponentials
    of the first's scores. NVIDIA's "Making Softmax More Efficient with NVIDIA Blackwell Ultra"
    (developer blog) shows this gap on GB200 (tensor cores idle between BMM1 and BMM2
    while the SFUs run softmax) and measures Blackwell Ultra's doubled MUFU.EX2 rate shortening
    it (FP8 attention forward about 35% faster on GB300); FlashAttention-4 (Zadouri et al. 2026,
    arXiv 2603.05451) finds B200's exponentials (16 per clock per SM, as on Hopper) as slow as
    its BF16 tensor cores at head dimension 128. 0 where the GPU states no rate."""
    if gpu.exp_per_s is None:
        return 0.0
    return scores / gpu.exp_per_s


def ring_exchange_bytes(model: ModelSpec, shape: ProfileShape, seq_length: int) -> float:
    """Bytes one rank sends per ring-attention step, forward: its K and V chunks, 16 bit, of
    b * s/cp tokens and the kv_hidden/tp width its TP rank holds (2 tensors x 2 bytes).
    Backward sends K and V again and their gradients (TE's ``AttnFuncWithCPAndKVP2P`` backward
    circulates ``kv`` and ``dkv``): twice as many bytes per step. With multi-head latent
    attention the up-projected K (d_qk + d_rope per head) and V (d_v per head) of every head go
    round the ring (Megatron-core's MLA runs context parallelism on the materialised K and V)."""
    tokens = shape.micro_batch_size * seq_length // shape.cp_size
    if model.is_mla:
        return BYTES_16BIT * tokens * model.num_attention_heads * (model.qk_head_width + model.v_head_width) / shape.tp_size
    return 2 * BYTES_16BIT * tokens * model.kv_hidden_size / shape.tp_size


def cp_comm_exposed_s(
    cluster: ClusterSpec, message_bytes: float, cp_size: int, tp_size: int,
    attention_forward_s: float, attention_backward_s: float,
) -> float:
    """Seconds of one layer's ring attention exchange (forward and backward) that attention
    compute does not hide, on one rank of a context-parallel group of ``cp_size`` (0 at 1).

    Each pass takes cp - 1 exchange steps (``ring_exchange_s``; backward moves twice the bytes),
    and step i's transfer runs beside the attention of the block already received, so cp - 1 of
    the cp blocks' compute can hide them (the last block has no transfer after it). What is
    hidden still slows that compute (``overlapped_exposed_s``, Lee et al. 2025)."""
    if cp_size <= 1:
        return 0.0
    link = cp_link(cluster, tp_size, cp_size)
    hiding = (cp_size - 1) / cp_size
    slowdown = cluster.gpu.overlap_slowdown
    forward_s = ring_exchange_s(message_bytes, cp_size, link)
    backward_s = ring_exchange_s(2 * message_bytes, cp_size, link)
    return overlapped_exposed_s(forward_s, hiding * attention_forward_s, slowdown) + overlapped_exposed_s(
        backward_s, hiding * attention_backward_s, slowdown
    )


def _fp8_cast_s(model: ModelSpec, gpu: GpuSpec, precision: Precision, tokens: float, tp_size: int) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's quantisation kernels on one TP rank (FP8's
    cast-transpose, MXFP8's and NVFP4's rowwise and columnwise block quantisation): each linear
    layer's input (tokens x its local in-width) forward, its output gradient (tokens x its local
    out-width) backward, at QUANTISATION's bytes per element (see FP8_CAST_TRANSPOSE_BYTES and
    MXFP8_QUANTISE_BYTES). Zero in 16 bit."""
    cost = QUANTISATION.get(precision)
    if cost is None:
        return 0.0, 0.0
    t = tp_size
    h, q, kv, f = model.hidden_size, model.q_width, model.kv_hidden_size, model.ffn_hidden_size
    up = (2 if model.mlp_activation is MlpActivation.SWIGLU else 1) * f
    inputs = tokens * (h + q / t + h + f / t)  # QKV, output projection, up (+ gate), down
    output_grads = tokens * ((q + 2 * kv) / t + h + up / t + h)
    return (
        elementwise_time_s(gpu, cost.bytes_per_element * inputs, kernels=cost.kernels),
        elementwise_time_s(gpu, cost.bytes_per_element * output_grads, kernels=cost.kernels),
    )


def fp8_attention_cast_s(model: ModelSpec, gpu: GpuSpec, tokens: float, tp_size: int) -> tuple[float, float]:
    """(forward, backward) seconds of FP8 attention's casts on one TP rank: Q, K and V to FP8
    forward (three kernels), the output gradient backward (one), ``FP8_ATTENTION_CAST_BYTES`` per
    element. Under multi-head latent attention the up-projected K and V of every head are what the
    kernel reads (d_qk + d_rope and d_v wide)."""
    heads = model.num_attention_heads
    if model.is_mla:
        qkv = heads * (2 * model.qk_head_width + model.v_head_width)
        out = heads * model.v_head_width
    else:
        qkv = model.q_width + 2 * model.kv_hidden_size
        out = model.q_width
    return (
        elementwise_time_s(gpu, FP8_ATTENTION_CAST_BYTES * tokens * qkv / tp_size, kernels=3),
        elementwise_time_s(gpu, FP8_ATTENTION_CAST_BYTES * tokens * out / tp_size, kernels=1),
    )


# Bytes of the 1-byte mask a dropout keeps per element for backward (Korthikanti et al. 2022 Table 2).
DROPOUT_MASK_BYTES = 1


def hidden_mask_bytes(model: ModelSpec, jit_dropout_masks: bool = False) -> int:
    """Bytes per token x hidden element of the masks a layer's two hidden dropouts keep for
    backward (one byte each, Korthikanti et al. 2022 Table 2's 2sbh). None for a model trained
    without hidden dropout (``ModelSpec.hidden_dropout`` 0: ATen returns the input and keeps no
    mask), unless the stack's bias-dropout-add is a TorchScript function (``jit_dropout_masks``),
    whose autodiff formula draws and keeps the mask at p = 0 too."""
    return 2 * DROPOUT_MASK_BYTES if model.hidden_dropout or jit_dropout_masks else 0


def score_kept_bytes(model: ModelSpec) -> int:
    """Bytes per attention score a layer keeps for backward without a fused attention kernel:
    the softmax output (2), which the P V GEMM and the softmax's backward read, and with attention
    dropout its 1-byte mask and 16-bit output (Korthikanti et al. 2022 Table 2's 5as^2b: 2 + 1 +
    2); 2 without (``ModelSpec.attention_dropout`` 0)."""
    return BYTES_16BIT + (DROPOUT_MASK_BYTES + BYTES_16BIT if model.attention_dropout else 0)


def _kept_bytes(
    model: ModelSpec, shape: ProfileShape, s: int, flash: bool, gemm_input_bytes: float = BYTES_16BIT,
    gathered_input_bytes: float | None = None, jit_dropout_masks: bool = False,
) -> tuple[int, int, int]:
    """Activation bytes one layer keeps for backward with no, selective and full recomputation
    (Korthikanti et al. 2022 Table 2, generalised to GQA and SwiGLU), on one rank of a
    context-parallel group: every term is that of its b * s/cp tokens. The four GEMM inputs kept
    for the weight gradients (QKV, attention output projection, MLP up and down) take
    ``gemm_input_bytes`` per element: 2, or the low-precision copy where the stack keeps that
    (``TrainingSpec.low_precision_saved_inputs``). Under sequence parallelism Korthikanti et al.
    keep the QKV and MLP-up inputs sharded (/t) like the rest of the replicated terms; where the
    stack keeps them all-gathered (``SpSavedInput.GATHERED``: ``gathered_input_bytes`` per
    element, see ``_gathered_input_bytes``) they are b*s*h each, at full width. The dropouts'
    masks and the dropped-out scores are kept only where the model trains with dropout
    (``hidden_mask_bytes``, ``score_kept_bytes``)."""
    t, b = shape.tp_size, shape.micro_batch_size
    h, a, kv, f = model.hidden_size, model.num_attention_heads, model.kv_hidden_size, model.ffn_hidden_size
    q = model.q_width
    tokens = b * s // shape.cp_size
    swiglu = model.mlp_activation is MlpActivation.SWIGLU
    g = gemm_input_bytes
    masks = hidden_mask_bytes(model, jit_dropout_masks)
    # LN inputs (4), QKV and MLP inputs (2 g), two dropout masks (2; none without hidden dropout)
    replicated = (4 + 2 * g + masks) * tokens * h
    # Q (2), out-proj input (g), K and V (4), the MLP's inner tensors: SwiGLU's gate and up
    # outputs (4) or GELU's / squared ReLU's input (2), and the down projection's input (g)
    split = (2 + g) * tokens * q + 4 * tokens * kv + ((4 if swiglu else 2) + g) * tokens * f
    scores = 0 if flash else score_kept_bytes(model) * a * tokens * s
    replicated_local = replicated / t if shape.sequence_parallel else replicated
    if shape.sequence_parallel and gathered_input_bytes is not None:
        # The norms' inputs and the masks stay sharded; the two GEMM inputs are the all-gathered ones.
        replicated_local = (4 + masks) * tokens * h / t + 2 * gathered_input_bytes * tokens * h
    checkpoint = BYTES_16BIT * tokens * h / (t if shape.sequence_parallel else 1)
    return int(replicated_local + (split + scores) / t), int(replicated_local + split / t), int(checkpoint)


# FlashAttention-2's backward (PyTorch's vendored flash_api.cpp ``mha_bwd``, as Dao-AILab's)
# accumulates dQ in an fp32 buffer of the queries' shape, ``dq_accum`` (``bool loop = true``).
FLASH_DQ_ACCUM_BYTES = BYTES_FP32


def backward_working_bytes(model: ModelSpec, shape: ProfileShape, s: int, flash: bool) -> int:
    """Bytes of gradients alive beside one layer's kept activations at the peak of its backward,
    on one rank of its TP and CP groups (16-bit activations and gradients).

    Autograd runs a layer's backward nodes in reverse order; each writes its input gradients
    while its saved tensors are still alive and releases them only after it has run
    (torch/csrc/autograd/engine.cpp ``evaluate_function``: ``fn.release_variables()`` after
    ``call_function``), and a gradient is freed once its last consumer has run. So beside the
    layer's activations (kept, or recomputed: ``solver.cost.stage.recompute_working_bytes``) the
    GPU holds the residual stream's gradient (b*s*h; /t with sequence parallelism), which waits
    in autograd's input buffer while a branch is back-propagated, plus at the largest of:

    - the MLP's second GEMM: the gradient of its input (b*s*f/t), written while that input is
      still saved, and with sequence parallelism the all-gathered output gradient (b*s*h);
    - the MLP's activation function: its input gradients, GELU (or squared ReLU) one b*s*f/t, SwiGLU two (the
      gate's and the up projection's: ``grad * other`` and ``grad * self`` of the product, or
      Megatron's fused ``bias_swiglu`` backward writing both at once), with the second GEMM's
      input gradient standing in for its freed input (tests/test_memory_backward.py reads this
      off PyTorch's allocator);
    - the attention output projection: the context's gradient (b*s*h/t), and the all-gathered
      output gradient under sequence parallelism;
    - the attention core. Fused (FlashAttention-2's ``mha_bwd``): the context's gradient, dQ,
      dK and dV at the query heads' width (``empty_like`` of the repeated K and V that
      torchtitan passes, or the ``dk_expanded`` / ``dv_expanded`` it sums over a GQA group) and
      the fp32 ``dq_accum`` (b*s*h/t each, the last at 4 bytes). Materialised scores: the
      context's gradient, and two 16-bit score gradients (the dropout's and the softmax's) with
      the dropout's output already freed: 2 bytes per score beyond the kept ones. Without
      attention dropout (``ModelSpec.attention_dropout`` 0) the two are the softmax output's
      gradient and the softmax input's, beside the kept softmax output, which nothing frees
      before the softmax's backward has run: 4 bytes per score beyond the kept 2.

    Weight gradients are not counted here: accumulated into the stack's gradient buffer (the
    model states), or under ZeRO-3 / FSDP written unsharded per layer and reduce-scattered,
    within the gather buffers' two-layer bound. Korthikanti et al. 2022 count saved activations
    only; this is the transient their Table 2 leaves out."""
    t, b = shape.tp_size, shape.micro_batch_size
    h, a, f = model.hidden_size, model.num_attention_heads, model.ffn_hidden_size
    tokens = b * s // shape.cp_size
    sequence_parallel = shape.sequence_parallel and t > 1
    residual = BYTES_16BIT * tokens * h / (t if sequence_parallel else 1)
    gathered = BYTES_16BIT * tokens * h if sequence_parallel else 0.0  # a row-parallel GEMM's output gradient
    inner = BYTES_16BIT * tokens * f / t
    heads = BYTES_16BIT * tokens * model.q_width / t
    activation_grads = 2 if model.mlp_activation is MlpActivation.SWIGLU else 1
    if flash:
        core = heads + heads + 2 * heads + FLASH_DQ_ACCUM_BYTES * tokens * model.q_width / t  # dctx, dQ, dK and dV, dq_accum
    else:
        score_grads = 2 * BYTES_16BIT - (BYTES_16BIT if model.attention_dropout else 0)  # less the freed dropout output
        core = heads + score_grads * a * tokens * s / t
    phases = (gathered + inner, activation_grads * inner, gathered + heads, core)
    return int(residual + max(phases))


def _block_matmuls(model: ModelSpec) -> tuple[tuple[int, int, bool], ...]:
    """The transformer block's matmuls in the order they run, as (input width, output width,
    column-parallel): torchtitan's Llama block (torchtitan/models/llama3/model: Attention runs
    wq, wk, wv, then wo; FeedForward ``w2(silu(w1(x)) * w3(x))`` runs w1, w3, w2; a GELU MLP
    has w1 and w2). Column-parallel outputs are split over the TP group; a row-parallel one
    (wo, w2) is the full hidden width before its reduction."""
    h, q, kv, f = model.hidden_size, model.q_width, model.kv_hidden_size, model.ffn_hidden_size
    mlp = ((h, f, True), (h, f, True), (f, h, False)) if model.mlp_activation is MlpActivation.SWIGLU else ((h, f, True), (f, h, False))
    return ((h, q, True), (h, kv, True), (h, kv, True), (q, h, False), *mlp)


def _op_selective(
    model: ModelSpec, gpu: GpuSpec, precision: Precision, shape: ProfileShape, tokens: int, flash: bool,
    checkpoint_bytes: int, attention_s: float, forward_elementwise_s: float,
) -> tuple[int, float]:
    """(kept bytes, recompute seconds) of one layer under torchtitan's per-op selective
    checkpointing (``SelectiveRecompute.OP``): the block's input (the checkpoint), the outputs of
    the 1st, 3rd, 5th... matmul (the policy recomputes every second one), and the SDPA kernel's
    output with its fp32 log-sum-exp per head are kept; backward recomputes the other matmuls and
    every element-wise op. Without a fused attention kernel the math SDPA is not on the save list:
    its output is not kept and the attention core is recomputed too."""
    t = shape.tp_size
    kept = float(checkpoint_bytes)
    recompute_s = forward_elementwise_s
    for index, (inputs, outputs, column) in enumerate(_block_matmuls(model)):
        width = outputs / t if column else outputs
        if index % 2 == 0:
            kept += BYTES_16BIT * tokens * width
        else:
            recompute_s += gemm_time_s(gpu, precision, tokens, width, inputs if column else inputs / t)
    if flash:
        kept += BYTES_16BIT * tokens * model.q_width / t + BYTES_FP32 * tokens * model.num_attention_heads / t
    else:
        recompute_s += attention_s
    return int(kept), recompute_s


def _layer_profile(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
    shape: ProfileShape, seq_length: int, index: int,
) -> LayerProfile:
    tp_size, micro_batch_size, sequence_parallel = shape.tp_size, shape.micro_batch_size, shape.sequence_parallel
    gpu: GpuSpec = cluster.gpu
    precision, flash = training.precision, training.flash_attention
    elementwise = FUSED if training.fused_kernels else EAGER
    t, b, s, cp = tp_size, micro_batch_size, seq_length, shape.cp_size
    h, a, kv, f = model.hidden_size, model.num_attention_heads, model.kv_hidden_size, model.ffn_hidden_size
    q = model.q_width  # the queries' and the attention output's width (h unless head_dim says otherwise)
    tokens = b * s // cp  # this rank's tokens: s/cp of each sequence
    tokens_local = tokens / t if sequence_parallel else tokens  # tokens that norms/dropout see
    swiglu = model.mlp_activation is MlpActivation.SWIGLU

    # Forward GEMMs of one TP rank (Megatron column/row parallel split).
    gemm_forward_s = (
        gemm_time_s(gpu, precision, tokens, (q + 2 * kv) / t, h)  # fused QKV projection
        + gemm_time_s(gpu, precision, tokens, h, q / t)  # attention output projection
        + gemm_time_s(gpu, precision, tokens, (2 if swiglu else 1) * f / t, h)  # up (+ gate)
        + gemm_time_s(gpu, precision, tokens, h, f / t)  # down
    )
    attention_forward_s, attention_backward_s, score_elementwise_s = _attention_core_s(
        model, gpu, training, b * a / t, s, elementwise, cp
    )
    activation_fn_bytes = (6 if swiglu else 4) * tokens * f / t
    head_copy_bytes = elementwise.head_copy_bytes * tokens * (2 * q + 2 * kv) / t
    other_elementwise_s = elementwise_time_s(
        gpu, elementwise.hidden_bytes * tokens_local * h + activation_fn_bytes + head_copy_bytes, kernels=elementwise.kernels
    )
    fp8_forward_s, fp8_backward_s = _fp8_cast_s(model, gpu, precision, tokens, t)
    if training.fp8_attention:
        cast_forward_s, cast_backward_s = fp8_attention_cast_s(model, gpu, tokens, t)
        fp8_forward_s, fp8_backward_s = fp8_forward_s + cast_forward_s, fp8_backward_s + cast_backward_s
    forward_s = gemm_forward_s + attention_forward_s + score_elementwise_s + other_elementwise_s + fp8_forward_s
    backward_s = (
        BACKWARD_TO_FORWARD * gemm_forward_s
        + ELEMENTWISE_BACKWARD_TO_FORWARD * (score_elementwise_s + other_elementwise_s)
        + attention_backward_s
        + fp8_backward_s
    )
    # The framework's host work per layer runs ahead of the GPU: a layer takes the longer of the two.
    # Under CUDA_LAUNCH_BLOCKING=1 each launch waits for its kernel, so the two add up.
    forward_s = layer_with_host_s(forward_s, training.host_s_per_layer, training.launch_blocking)
    backward_s = layer_with_host_s(backward_s, BACKWARD_TO_FORWARD * training.host_s_per_layer, training.launch_blocking)
    selective_recompute_s = 0.0 if flash else attention_forward_s + score_elementwise_s

    # 2 all-reduces forward + 2 backward of the b*s*h activation (or the same volume as
    # all-gather + reduce-scatter pairs with sequence parallelism). Overlapped inside the GEMMs
    # (``training.tp_comm_overlap``), they cost what the GEMMs lose running beside them.
    tp_comm_s = 4 * _activation_all_reduce_s(cluster, tokens, h, t)
    if training.tp_comm_overlap:
        tp_comm_s = overlapped_exposed_s(tp_comm_s, (1 + BACKWARD_TO_FORWARD) * gemm_forward_s, gpu.overlap_slowdown)
    tp_comm_s += qkv_subshard_gather_s(model, cluster, tokens, t)

    cp_comm_s = cp_comm_exposed_s(
        cluster, ring_exchange_bytes(model, shape, s), cp, t, attention_forward_s, attention_backward_s
    )

    activation, selective, checkpoint = _kept_bytes(
        model, shape, s, flash, _saved_input_bytes(training), _gathered_input_bytes(training, shape),
        training.jit_dropout_masks,
    )
    if training.selective_recompute is SelectiveRecompute.OP:
        selective, selective_recompute_s = _op_selective(
            model, gpu, precision, shape, tokens, flash, checkpoint,
            attention_forward_s + score_elementwise_s, other_elementwise_s,
        )
    else:
        modules = training.recompute_modules
        if RecomputeModule.CORE_ATTN not in modules:  # the scores stay: nothing of the core is dropped
            selective, selective_recompute_s = activation, 0.0
        if RecomputeModule.LAYERNORM in modules:
            dropped, again_s = _layernorm_recompute(model, gpu, tokens_local, _saved_input_bytes(training))
            selective, selective_recompute_s = selective - dropped, selective_recompute_s + again_s
    return LayerProfile(
        name=f"layer.{index}",
        kind=LayerKind.TRANSFORMER,
        forward_s=forward_s,
        backward_s=backward_s,
        parameter_count=layer_parameter_count(model) // t,
        largest_tensor_parameter_count=largest_layer_tensor_count(model) // t,
        activation_bytes=activation,
        selective_activation_bytes=selective,
        checkpoint_bytes=checkpoint,
        output_bytes=int(BYTES_16BIT * tokens * h / t),
        selective_recompute_s=selective_recompute_s,
        tp_comm_s=tp_comm_s,
        cp_comm_s=cp_comm_s,
        model_flops=3.0 * (layer_forward_gemm_flops(model, tokens) + attention_score_flops(model, b, s) / cp) / t,
        backward_working_bytes=backward_working_bytes(model, shape, s, flash),
    )


def _gathered_input_bytes(training: TrainingSpec, shape: ProfileShape) -> float | None:
    """Bytes per element of the all-gathered QKV and MLP-up inputs a column-parallel GEMM keeps
    under sequence parallelism (``SpSavedInput.GATHERED``), or None where it keeps the sharded
    input (``SpSavedInput.SHARDED``, Megatron) or there is no sequence parallelism. The gathered
    copy is in the dtype the all-gather ran in: FP8 for FP8 GEMMs (torchao's
    ``PrepareFloat8ModuleInput`` casts before the all-gather and ``Float8Linear`` saves the FP8
    input as it arrives: solver.spec.training.SpSavedInput), else 16 bits (the block-scaled
    formats included: no source here shows them gathered in their low precision)."""
    if training.sp_saved_input is not SpSavedInput.GATHERED or not shape.sequence_parallel or shape.tp_size <= 1:
        return None
    return bytes_per_element(training.precision) if training.precision is Precision.FP8 else BYTES_16BIT


def _saved_input_bytes(training: TrainingSpec) -> float:
    """Bytes per element of a GEMM input kept for backward: the FP8-family copy where the stack's
    GEMMs keep it (``TrainingSpec.low_precision_saved_inputs``), else 16 bit."""
    low_precision = training.low_precision_saved_inputs and _quantised(training.precision)
    return bytes_per_element(training.precision) if low_precision else BYTES_16BIT


def _layernorm_recompute(model: ModelSpec, gpu: GpuSpec, tokens_local: float, saved_input_bytes: float) -> tuple[int, float]:
    """(kept bytes dropped, backward seconds added) by Megatron-core's ``layernorm`` recompute
    module (transformer_layer.py at NVIDIA/Megatron-LM 8f1c2f8ae53b4e3f32c0ae7f397d8b38a675eaa2:
    ``input_layernorm_checkpoint`` and ``pre_mlp_norm_checkpoint`` are output-discarding
    checkpoints): the two norms' outputs, which the attention's and the MLP's first GEMMs keep
    as their inputs (Korthikanti et al.'s 'QKV and MLP inputs'), are freed after use and the
    norms run again in backward (read the 16-bit input, write the output: 4 bytes per element
    each, as ``FUSED`` counts a LayerNorm)."""
    h = model.hidden_size
    return int(2 * saved_input_bytes * tokens_local * h), elementwise_time_s(gpu, 2 * 4 * tokens_local * h, kernels=2)


def _mlp_recompute(layer: LayerProfile, model: ModelSpec, gpu: GpuSpec, training: TrainingSpec, tokens: float, tp_size: int) -> LayerProfile:
    """A dense layer under Megatron-core's ``mlp`` recompute module (transformer_layer.py at
    NVIDIA/Megatron-LM 8f1c2f8ae53b4e3f32c0ae7f397d8b38a675eaa2: ``tensor_parallel.checkpoint``
    (``te_checkpoint`` in FP8) of ``self.mlp`` from the pre-MLP norm's output; MoE layers are
    left alone, ``if not self.is_moe_layer``): the MLP's inner tensors (the activation's input,
    2 x 2 bytes per element for SwiGLU, 2 for GELU or squared ReLU, and the down projection's input) are not
    kept, and its GEMMs and activation run again in backward. Its input is the norm output the
    layer keeps anyway. Selective recompute only (``selective_*`` fields)."""
    t, h, f = tp_size, model.hidden_size, model.ffn_hidden_size
    swiglu = model.mlp_activation is MlpActivation.SWIGLU
    precision = training.precision
    dropped = int(((4 if swiglu else 2) + _saved_input_bytes(training)) * tokens * f / t)
    again_s = (
        gemm_time_s(gpu, precision, tokens, (2 if swiglu else 1) * f / t, h)
        + gemm_time_s(gpu, precision, tokens, h, f / t)
        + elementwise_time_s(gpu, (6 if swiglu else 4) * tokens * f / t, kernels=1)
    )
    return replace(
        layer,
        selective_activation_bytes=layer.selective_activation_bytes - dropped,
        selective_recompute_s=layer.selective_recompute_s + again_s,
    )


def _renamed(layer: LayerProfile, name: str) -> LayerProfile:
    """``layer`` under another name: its fields copied into a new instance (``dataclasses.replace``
    re-runs the constructor and ``copy.copy`` the pickle protocol, which a search asking for
    thousands of 61-layer profiles notices)."""
    renamed = object.__new__(LayerProfile)
    renamed.__dict__.update(layer.__dict__)
    object.__setattr__(renamed, "name", name)
    return renamed


def _mla_layer(standard: LayerProfile, cost: MlaCost, up_proj_recompute: bool = False) -> LayerProfile:
    """A layer with multi-head latent attention: the layer costed with h-wide projections, its
    fused QKV and output GEMMs swapped for MLA's down, up and output projections and its kept
    Q, K, V for MLA's wider heads and latents (``solver.cost.mla``). Backward costs the GEMMs in
    the dense layer's ratio (BACKWARD_TO_FORWARD). With ``up_proj_recompute`` (Megatron-core's
    ``mla_up_proj`` module) selective recomputation frees the up-projected Q, K, V and runs the up
    projections again in backward."""
    gemm_s = cost.gemm_forward_s - cost.standard_gemm_forward_s
    kept = int(cost.kept_bytes)
    dropped = int(cost.up_proj_kept_bytes) if up_proj_recompute else 0
    return replace(
        standard,
        forward_s=standard.forward_s + gemm_s,
        backward_s=standard.backward_s + BACKWARD_TO_FORWARD * gemm_s,
        activation_bytes=standard.activation_bytes + kept,
        selective_activation_bytes=standard.selective_activation_bytes + kept - dropped,
        selective_recompute_s=standard.selective_recompute_s + (cost.up_proj_forward_s if up_proj_recompute else 0.0),
    )


def dispatcher_host_floor_s(forward_s: float, backward_s: float, ep_comm_s: float, host_s: float) -> tuple[float, float]:
    """An MoE layer's forward and backward GPU time where its token dispatcher synchronises the
    host with the GPU (``training.moe_host_s_per_layer``: ``host_s`` per forward pass, twice it
    backward). The host cannot launch ahead across the synchronisation, so each pass takes the longer
    of its GPU work, the exposed all-to-alls (``ep_comm_s``, half of them each way) included, and its
    host work; what the all-to-alls already take is not charged again."""
    if host_s <= 0.0:
        return forward_s, backward_s
    half_ep_s = ep_comm_s / 2
    return max(forward_s, host_s - half_ep_s), max(backward_s, BACKWARD_TO_FORWARD * host_s - half_ep_s)


def _moe_layer(
    dense: LayerProfile, cost: MoeMlpCost, gpu: GpuSpec, precision: Precision, ep_comm_overlap: bool, act_recompute: bool = False,
    qkv_gather_s: float = 0.0, host_s: float = 0.0,
) -> LayerProfile:
    """An MoE layer: the dense layer of the same shape with its MLP swapped for the router,
    shared and routed experts, and the dispatch and combine all-to-alls added
    (``solver.cost.moe``), exposed or run beside the layer's compute as the stack does
    (``moe.ep_comm_exposed_s``). Backward costs its GEMMs and element-wise work in the dense
    layer's ratios (BACKWARD_TO_FORWARD, ELEMENTWISE_BACKWARD_TO_FORWARD). With ``act_recompute``
    (Megatron-core's ``moe_act`` module) selective recomputation drops the experts' fc2 inputs and
    runs their activation function again in backward. FP8-family precisions quantise the MoE
    MLP's GEMM inputs forward and output gradients backward where the dense layer quantised its
    MLP's, at QUANTISATION's bytes per element."""
    gemm_s = cost.gemm_forward_s - cost.dense_gemm_forward_s
    elementwise_s = elementwise_time_s(gpu, cost.elementwise_bytes, kernels=cost.elementwise_kernels)
    kept = int(cost.kept_bytes)
    forward_s = dense.forward_s + gemm_s + elementwise_s
    backward_s = dense.backward_s + BACKWARD_TO_FORWARD * gemm_s + ELEMENTWISE_BACKWARD_TO_FORWARD * elementwise_s
    quantisation = QUANTISATION.get(precision)
    if quantisation is not None:
        kernels = cost.quantised_tensors * quantisation.kernels // FP8_CAST_KERNELS  # NVFP4's amax pass doubles them
        forward_s += elementwise_time_s(gpu, quantisation.bytes_per_element * cost.quantised_forward_elements, kernels=kernels)
        backward_s += elementwise_time_s(gpu, quantisation.bytes_per_element * cost.quantised_backward_elements, kernels=kernels)
    ep_comm_s = ep_comm_exposed_s(cost.ep_comm_s, forward_s + backward_s, ep_comm_overlap, gpu.overlap_slowdown)
    forward_s, backward_s = dispatcher_host_floor_s(forward_s, backward_s, ep_comm_s, host_s)
    return replace(
        dense,
        forward_s=forward_s,
        backward_s=backward_s,
        activation_bytes=dense.activation_bytes + kept,
        selective_activation_bytes=dense.selective_activation_bytes + kept - (int(cost.act_output_bytes) if act_recompute else 0),
        selective_recompute_s=dense.selective_recompute_s + (cost.act_recompute_s if act_recompute else 0.0),
        # The dense layer's four equal TP collectives, two of them its MLP's, which the MoE MLP's
        # own replace (exposed as ``training.tp_comm_overlap`` left them: half of its figure); the
        # attention's QKV gather of ``qkv_subshard_gather_s`` (``qkv_gather_s``) stays whole.
        tp_comm_s=(dense.tp_comm_s - qkv_gather_s) / 2 + qkv_gather_s + cost.tp_comm_s,
        ep_comm_s=ep_comm_s,
        parameter_count=cost.parameter_count,
        expert_parameter_count=cost.expert_parameter_count,
        model_flops=dense.model_flops + cost.model_flops,
    )


def _embedding_profile(
    model: ModelSpec, cluster: ClusterSpec, shape: ProfileShape, seq_length: int
) -> LayerProfile:
    tp_size, micro_batch_size, sequence_parallel = shape.tp_size, shape.micro_batch_size, shape.sequence_parallel
    gpu = cluster.gpu
    t, h = tp_size, model.hidden_size
    tokens = micro_batch_size * seq_length // shape.cp_size
    tokens_local = tokens / t if sequence_parallel else tokens
    # Row gather (read + write 16 bits) and dropout (read, write, 1-byte mask): 9 bytes per element;
    # backward scatter-adds the gradient rows into the vocabulary-parallel table.
    forward_s = elementwise_time_s(gpu, 9 * tokens_local * h, kernels=2)
    backward_s = elementwise_time_s(gpu, 2 * BYTES_16BIT * tokens * h, kernels=2)
    # The vocabulary-parallel embedding sums its partial outputs with one all-reduce (forward).
    tp_comm_s = _activation_all_reduce_s(cluster, tokens, h, t)
    # Embedding dropout mask (Korthikanti et al. 2022: s*b*h*p/t); none without hidden dropout (the
    # embedding's dropout is an eager nn.Dropout in every stack here, which keeps nothing at p = 0).
    mask_bytes = int(DROPOUT_MASK_BYTES * tokens_local * h) if model.hidden_dropout else 0
    return LayerProfile(
        name="embedding",
        kind=LayerKind.EMBEDDING,
        forward_s=forward_s,
        backward_s=backward_s,
        parameter_count=embedding_parameter_count(model) // t,
        largest_tensor_parameter_count=model.vocab_size * h // t,  # the vocabulary-parallel token table
        activation_bytes=mask_bytes,
        selective_activation_bytes=mask_bytes,
        checkpoint_bytes=mask_bytes,
        output_bytes=int(BYTES_16BIT * tokens * h / t),
        tp_comm_s=tp_comm_s,
    )


def loss_peak_bytes_per_logit(
    loss_dtype: LossDtype, loss_kernel: LossKernel, fused_kernels: bool, keeps_logits: bool = False,
    vocab_parallel: bool = False,
) -> int:
    """Bytes per logit alive at the loss's peak, which is at the start of its backward (the
    caller has dropped the 16-bit logits unless the loss keeps them: torchtitan's train.py
    ``del pred`` before ``loss.backward()``).

    FUSED (a hand-written autograd function: Megatron's vocab-parallel cross entropy,
    megatron/core/tensor_parallel/cross_entropy.py): the fp32 copy of the logits turned into the
    softmax in place and saved, beside the 16-bit logits while its forward runs; backward writes
    the gradient in place into the saved softmax and casts it to 16 bit: 2 + 4 (16-bit loss: 2 + 2).
    COMPILED with ``fused_kernels`` (torch.compile: AOTAutograd's min-cut partition with
    Inductor's decompositions saves the 16-bit logits and two fp32 numbers per row, the max and
    the log-sum-exp, and its backward writes the 16-bit gradient from them, as
    tests/test_memory_mechanisms.py reads off the partitioned graph): 2 + 2. EAGER (or COMPILED
    without ``fused_kernels``): ``cross_entropy(pred.float(), ...)`` is log_softmax then nll_loss;
    ``_log_softmax`` saves its output for backward (derivatives.yaml), nll_loss_backward writes a
    dense gradient of the same shape, and ``_log_softmax_backward_data`` a new one beside both
    before the cast back: 4 + 4 + 4 in fp32 (the fp32 copy and the 16-bit logits are gone by then;
    the forward's peak, 2 + 4 + 4, is lower); 2 + 2 + 2 for a 16-bit loss (a model cast to half).

    ``keeps_logits`` (``TrainingSpec.loss_keeps_logits``): the training loop still references the
    16-bit logits when backward starts, 2 bytes more (torchtitan before e29b6b4d4, #391, "del
    logits=(bs, seq_len, vocab_size) to save 3.9G memory"); the compiled loss saves them anyway.

    ``vocab_parallel`` (tensor parallelism: the logits are sharded over the vocabulary): eager
    PyTorch computes the cross entropy of vocabulary-sharded logits through DTensor's loss
    parallel (torch/distributed/tensor/parallel/loss.py, torchtitan's ``loss_parallel()``), which
    replaces the two fused kernels with decompositions. Its ``_log_softmax`` upcasts to fp32
    (``elementwise_dtypes``) and holds the fp32 input, ``shifted`` and ``exp(shifted)`` (or the fp32
    result) beside the 16-bit logits, then casts the result back for a 16-bit loss: 2 + 4 + 4 + 4
    (+ 2). Its backward (``_nll_loss_and_log_softmax_backward``: ``(zeros_like(x) + exp(x)) *
    grad_output``) holds the saved log-softmax output, the zeros, ``exp(x)`` and their sum: 4 x
    the result's bytes. The peak is the larger of the two: fp32 16 (+ 2 if the loop keeps the
    logits) against the single kernels' 12, a 16-bit loss 16 (its forward) against 6, as
    tests/test_memory_mechanisms.py reads off PyTorch's allocator on CPU.

    IN_PLACE (Transformer Engine's parallel_cross_entropy, ``LossKernel.IN_PLACE``): the 16-bit
    logits, overwritten by their gradient in the forward and saved for backward, are all it holds
    at any point (its per-row maximum, sum and target logit are three fp32 numbers a row): 2,
    whatever the loss dtype (it computes in fp32 registers) or the loop keeps (the same tensor).
    """
    if loss_kernel is LossKernel.IN_PLACE:
        return BYTES_16BIT
    if loss_kernel is LossKernel.COMPILED and fused_kernels:
        return BYTES_16BIT + BYTES_16BIT
    kept_logits = BYTES_16BIT if keeps_logits else 0
    result_bytes = BYTES_16BIT if loss_dtype is LossDtype.HALF else BYTES_FP32
    if loss_kernel is LossKernel.FUSED:
        return kept_logits + BYTES_16BIT + result_bytes
    if vocab_parallel:
        # forward: the 16-bit logits, the fp32 input, shifted and exp (or the fp32 result), and
        # the result cast back to 16 bit for a 16-bit loss; backward: the saved output, zeros,
        # exp and their sum.
        forward = BYTES_16BIT + 3 * BYTES_FP32 + (result_bytes if loss_dtype is LossDtype.HALF else 0)
        return max(forward, kept_logits + 4 * result_bytes)
    return kept_logits + 3 * result_bytes


def _head_profile(
    model: ModelSpec, cluster: ClusterSpec, precision: Precision,
    shape: ProfileShape, seq_length: int, loss_bytes_per_logit: int = BYTES_FP32, fp8_output_proj: bool = False,
) -> LayerProfile:
    """The output layer and the loss on the last stage. The logits GEMM runs in 16 bit, or in MXFP8
    with ``fp8_output_proj`` (``TrainingSpec.fp8_output_proj``), which then quantises its input
    forward and the logits' gradient backward at MXFP8's bytes per element, one kernel each."""
    tp_size, micro_batch_size, sequence_parallel = shape.tp_size, shape.micro_batch_size, shape.sequence_parallel
    gpu = cluster.gpu
    t, h, vocab = tp_size, model.hidden_size, model.vocab_size
    tokens = micro_batch_size * seq_length // shape.cp_size
    tokens_local = tokens / t if sequence_parallel else tokens
    predicted = predicted_tokens(model, tokens)
    precision16 = _sixteen_bit(precision)
    logits_precision = Precision.MXFP8 if fp8_output_proj else precision16
    gemm_forward_s = gemm_time_s(gpu, logits_precision, predicted, vocab / t, h)
    if model.architecture is Architecture.ENCODER:
        gemm_forward_s += gemm_time_s(gpu, precision16, predicted, h, h)  # BERT's MLM dense transform
    elementwise_forward_s = elementwise_time_s(
        gpu, 4 * tokens_local * h + CROSS_ENTROPY_BYTES * predicted * vocab / t, kernels=4
    )
    forward_s = gemm_forward_s + elementwise_forward_s
    backward_s = BACKWARD_TO_FORWARD * gemm_forward_s + ELEMENTWISE_BACKWARD_TO_FORWARD * elementwise_forward_s
    if fp8_output_proj:
        quantise = QUANTISATION[Precision.MXFP8].bytes_per_element
        forward_s += elementwise_time_s(gpu, quantise * predicted * h, kernels=1)
        backward_s += elementwise_time_s(gpu, quantise * predicted * vocab / t, kernels=1)
    # Backward all-reduce of the logits-projection input gradient.
    tp_comm_s = _activation_all_reduce_s(cluster, tokens, h, t)
    # Final norm input, projection input, fp32 softmax of the local vocabulary shard
    # (Korthikanti et al. 2022: 4*s*b*h/t*(1 + v/h) on the last stage); the head runs one
    # micro-batch at a time, so its activations are its peak at the loss: the logits in 16 bit
    # and the loss's tensors (``loss_peak_bytes_per_logit``) rather than the fp32 softmax alone.
    logits = predicted * vocab / t
    kept = int(BYTES_16BIT * tokens_local * h + BYTES_16BIT * predicted * h + loss_bytes_per_logit * logits)
    return LayerProfile(
        name="head",
        kind=LayerKind.HEAD,
        forward_s=forward_s,
        backward_s=backward_s,
        parameter_count=head_parameter_count(model) // t,
        # The untied output projection; a tied head's is the embedding's, counted there.
        largest_tensor_parameter_count=(0 if model.tied_embeddings else model.vocab_size * model.hidden_size) // t,
        activation_bytes=kept,
        selective_activation_bytes=kept,
        checkpoint_bytes=kept,
        output_bytes=0,
        tp_comm_s=tp_comm_s,
        model_flops=3.0 * logits_forward_flops(model, predicted) / t,
    )


def _with_mtp(
    head: LayerProfile, mtp_layer: LayerProfile, embedding: LayerProfile, model: ModelSpec, cluster: ClusterSpec,
    precision: Precision, shape: ProfileShape, seq_length: int,
) -> LayerProfile:
    """The head of a model with multi-token prediction: the output head and loss, then
    ``model.mtp_num_layers`` MTP modules on the same (last) pipeline stage, each (DeepSeek-V3 Sec
    2.2; Megatron-core ``MultiTokenPredictionLayer.forward``): the embedding of the shifted
    tokens (``embedding``'s lookup again), two RMSNorms, the 2h -> h ``eh_proj`` GEMM
    (column-parallel), one transformer layer (``mtp_layer``, costed as the model's own layer of
    that kind: its GEMMs, attention, all-to-alls and kept activations), a final norm, and the
    output head and cross entropy again (the head's GEMM and loss). Megatron-Bridge places them in
    the last model chunk with the loss (recipes/deepseek/deepseek_v3.py
    ``set_deepseek_v3_pipeline_model_parallel_layout``: ``["mtp"] * mtp_num_layers + ["loss"]``).

    The head runs one micro-batch at a time on the last stage (1F1B and the interleaved schedule
    both run the last chunk's forward and backward back to back), so the MTP layer's kept
    activations are one micro-batch's, beside the main head's peak at the loss and the MTP
    loss's 16-bit logit gradient (Transformer Engine's fused cross entropy writes it in forward
    and keeps it for backward). Not charged: the copy of the embedding table Megatron-core keeps
    on the last stage when it is not the first (gpt_model.py ``if self.pre_process or
    self.mtp_process``; the profile does not know the pipeline depth)."""
    depth = model.mtp_num_layers
    gpu, t, h = cluster.gpu, shape.tp_size, model.hidden_size
    tokens = shape.micro_batch_size * seq_length // shape.cp_size
    tokens_local = tokens / t if shape.sequence_parallel else tokens
    eh_proj_s = gemm_time_s(gpu, precision, tokens, h / t, 2 * h)
    # enorm, hnorm and the final norm read and write 16-bit tokens x h (8 bytes per element for
    # the norm's forward as FUSED counts its LayerNorms); the concatenation copies 2h wide.
    norms_s = elementwise_time_s(gpu, (3 * 4 + 2 * 4) * tokens_local * h, kernels=4)
    forward_s = mtp_layer.forward_s + eh_proj_s + norms_s + embedding.forward_s + head.forward_s
    backward_s = (
        mtp_layer.backward_s + BACKWARD_TO_FORWARD * eh_proj_s + ELEMENTWISE_BACKWARD_TO_FORWARD * norms_s
        + embedding.backward_s + head.backward_s
    )
    # Kept per module beyond its layer's: the two normalised inputs and their concatenation
    # (eh_proj's input), the final norm's input, and the MTP loss's logit gradient.
    logits = predicted_tokens(model, tokens) * model.vocab_size / t
    extra_kept = int(BYTES_16BIT * (2 * h + 2 * h + h) * tokens_local + BYTES_16BIT * logits)
    return replace(
        head,
        forward_s=head.forward_s + depth * forward_s,
        backward_s=head.backward_s + depth * backward_s,
        parameter_count=head.parameter_count + depth * (mtp_layer.parameter_count + 2 * h * h // t + 3 * h),
        expert_parameter_count=head.expert_parameter_count + depth * mtp_layer.expert_parameter_count,
        activation_bytes=head.activation_bytes + depth * (mtp_layer.activation_bytes + extra_kept),
        selective_activation_bytes=head.selective_activation_bytes + depth * (mtp_layer.selective_activation_bytes + extra_kept),
        checkpoint_bytes=head.checkpoint_bytes + depth * (mtp_layer.checkpoint_bytes + extra_kept),
        selective_recompute_s=head.selective_recompute_s + depth * mtp_layer.selective_recompute_s,
        tp_comm_s=head.tp_comm_s + depth * (mtp_layer.tp_comm_s + embedding.tp_comm_s + head.tp_comm_s),
        cp_comm_s=head.cp_comm_s + depth * mtp_layer.cp_comm_s,
        ep_comm_s=head.ep_comm_s + depth * mtp_layer.ep_comm_s,
        model_flops=head.model_flops + depth * (mtp_layer.model_flops + 3.0 * 2 * tokens * 2 * h * h / t + head.model_flops),
    )


@dataclass(frozen=True)
class AnalyticLayers:
    """The analytic profile's chain before each transformer layer gets its own name: the
    embedding, one ``LayerProfile`` object per transformer layer shared by every layer of its
    kind (a dense model's layers are one object; an MoE model's, dense or MoE, two), and the head.
    It reads as a profile's chain does (``embedding``, ``transformer_layers``, ``head``,
    ``layers``): the search's bounds and partition problems read it without building the named
    copies, and repeated objects let them cost each kind of layer once (``ModelProfile`` has a
    named copy per layer, as a measured profile does)."""

    embedding: LayerProfile
    transformer_layers: tuple[LayerProfile, ...]
    head: LayerProfile

    @property
    def layers(self) -> tuple[LayerProfile, ...]:
        return (self.embedding, *self.transformer_layers, self.head)

    def origins(self) -> dict[str, str]:
        """Every layer's origin by name, as ``ModelProfile.origins`` (all analytic)."""
        names = ("embedding", *(f"layer.{i}" for i in range(len(self.transformer_layers))), "head")
        return {name: Origin.ANALYTIC.value for name in names}


@dataclass(frozen=True)
class _DenseLayers:
    """What of an analytic profile its expert-parallel and expert tensor-parallel sizes do not change: the transformer
    layer before its MLP is made an MoE one, the dense layer, the embedding, and the head
    before any multi-token-prediction modules (which may hold an MoE layer)."""

    layer: LayerProfile
    dense_layer: LayerProfile
    embedding: LayerProfile
    head: LayerProfile


@lru_cache(maxsize=4096)
def _dense_layers(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, shape: ProfileShape) -> _DenseLayers:
    """The layers of ``analytic_layers`` that read neither ``shape.ep_size`` nor
    ``shape.expert_tp_size`` (the caller passes 1 and None): shared by a search's expert-parallel
    sizes of one (tp, micro-batch, SP, cp)."""
    seq = training.seq_length
    args = (shape, seq)
    layer = _layer_profile(model, cluster, training, *args, index=0)
    tokens = shape.micro_batch_size * seq // shape.cp_size
    modules = _recompute_modules(training)
    if model.is_mla:
        cost_mla = mla_cost(model, cluster.gpu, training.precision, tokens, shape.tp_size)
        layer = _mla_layer(layer, cost_mla, RecomputeModule.MLA_UP_PROJ in modules)
    embedding = _embedding_profile(model, cluster, *args)
    dense_layer = _mlp_recompute(layer, model, cluster.gpu, training, tokens, shape.tp_size) if RecomputeModule.MLP in modules else layer
    loss_bytes = loss_peak_bytes_per_logit(
        training.loss_dtype, training.loss_kernel, training.fused_kernels, training.loss_keeps_logits,
        vocab_parallel=shape.tp_size > 1,
    )
    head = _head_profile(model, cluster, training.precision, *args, loss_bytes_per_logit=loss_bytes, fp8_output_proj=training.fp8_output_proj)
    return _DenseLayers(layer, dense_layer, embedding, head)


def _recompute_modules(training: TrainingSpec) -> tuple[RecomputeModule, ...]:
    """Megatron-core's recompute modules (selective recomputation in a Megatron-style stack)."""
    return training.recompute_modules if training.selective_recompute is SelectiveRecompute.ATTENTION else ()


# ``moe_mlp_cost`` reads the tokens, not how sequence parallelism splits the norms: shapes that
# differ only in SP (or in micro-batch and cp with the same tokens) share it.
_moe_mlp_cost = lru_cache(maxsize=4096)(moe_mlp_cost)


@lru_cache(maxsize=64)
def _moe_layer_flags(model: ModelSpec) -> tuple[bool, ...]:
    """``model.is_moe_layer(i)`` for every transformer layer."""
    return tuple(model.is_moe_layer(i) for i in range(model.num_layers))


@lru_cache(maxsize=4096)
def analytic_layers(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    shape: ProfileShape,
) -> AnalyticLayers:
    """The layers of ``analytic_profile(model, cluster, training, shape)``, each kind of
    transformer layer one shared object (``AnalyticLayers``). Cached as the profile is."""
    seq = training.seq_length
    expert_free = shape if shape.ep_size == 1 and shape.expert_tp_size is None else replace(shape, ep_size=1, expert_tp_size=None)
    dense = _dense_layers(model, cluster, training, expert_free)
    layer, dense_layer, embedding, head = dense.layer, dense.dense_layer, dense.embedding, dense.head
    tokens = shape.micro_batch_size * seq // shape.cp_size
    moe_layer = layer
    if model.is_moe:
        cost = _moe_mlp_cost(
            model, cluster, training.precision, tokens, shape.tp_size, shape.ep_size, _saved_input_bytes(training), training.expert_gemms,
            shape.expert_tp_size, MOE_ACT_INPUT_BYTES[training.moe_act_input_dtype], training.moe_dispatcher,
        )
        moe_act = RecomputeModule.MOE_ACT in _recompute_modules(training)
        moe_layer = _moe_layer(
            layer, cost, cluster.gpu, training.precision, training.ep_comm_overlap, moe_act,
            qkv_subshard_gather_s(model, cluster, tokens, shape.tp_size), training.moe_host_s_per_layer,
        )
        blocks = tuple(moe_layer if moe else dense_layer for moe in _moe_layer_flags(model))
    else:
        blocks = (dense_layer,) * model.num_layers
    if model.mtp_num_layers:
        mtp_layer = moe_layer if mtp_layer_is_moe(model) else dense_layer
        head = _with_mtp(head, mtp_layer, embedding, model, cluster, training.precision, shape, seq)
    return AnalyticLayers(embedding, blocks, head)


def clear_caches() -> None:
    """Empty the analytic model's caches (a benchmark's cold start)."""
    for cached in (analytic_profile, analytic_layers, _dense_layers, _moe_mlp_cost, _moe_layer_flags):
        cached.cache_clear()


@lru_cache(maxsize=4096)
def analytic_profile(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    shape: ProfileShape,
) -> ModelProfile:
    """Per-layer profile of ``model`` for one micro-batch of ``shape.micro_batch_size`` on one
    GPU of a TP group of ``shape.tp_size`` and a CP group of ``shape.cp_size``.

    All transformer layers are identical in the analytic model (an MoE model's are of two
    kinds, dense and MoE: ``ModelSpec.is_moe_layer``); a measured profile may differ per
    layer. Cached: the optimizer asks for the same (tp, micro-batch, SP) many times.
    """
    chain = analytic_layers(model, cluster, training, shape)
    blocks = chain.transformer_layers
    # Each kind's object is named layer.0; every other layer is a renamed copy.
    layers = (chain.embedding, *(block if i == 0 else _renamed(block, f"layer.{i}") for i, block in enumerate(blocks)), chain.head)
    return ModelProfile(
        model_name=model.name,
        tp_size=shape.tp_size,
        micro_batch_size=shape.micro_batch_size,
        seq_length=training.seq_length,
        precision=training.precision,
        layers=layers,
        device=cluster.gpu.name,
        cp_size=shape.cp_size,
    )
