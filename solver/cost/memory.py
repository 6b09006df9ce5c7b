"""Memory per GPU of one pipeline stage: model states under ZeRO, activations in flight, reserve.

Sources: Rajbhandari et al. 2020 (ZeRO, arXiv 1910.02054) Sec 3.1 and 5 for model states
(2 + 2 + K bytes per parameter, K = 12 for mixed-precision Adam, 8 with bf16 moments: DeepSeek-V3,
arXiv 2412.19437 Sec 3.3.3); Korthikanti et al. 2022 Sec 4.2
for the in-flight micro-batches of 1F1B (stage i of p holds p - i) and the interleaved factor
(1 + (p - 1)/(p * v)) on the first stage; Narayanan et al. 2021 Sec 2.2.
"""

from __future__ import annotations

from solver.spec.training import DEFAULT_FRAGMENTATION_FRACTION, MomentsDtype, OptimizerKind, ZeroStage

GIB_BYTES = 2**30
WEIGHT_BYTES_PER_PARAM = 2  # 16-bit weights used by forward and backward
GRAD_BYTES_PER_PARAM = 2  # 16-bit gradients (ZeRO paper's 2*Psi)
MASTER_BYTES_PER_PARAM = 4  # the optimizer's fp32 master weights, whatever its moments' dtype
MOMENTS_PER_PARAM = {
    OptimizerKind.ADAM: 2,  # momentum and variance (exp_avg, exp_avg_sq)
    OptimizerKind.SGD: 1,  # momentum
    OptimizerKind.MUON: 1,  # momentum (its Adam-stepped parameters' second moment: solver.cost.muon)
}
MOMENT_BYTES = {
    MomentsDtype.FP32: 4,
    MomentsDtype.BF16: 2,  # Megatron-core's precision-aware optimizer; DeepSeek-V3 Sec 3.3.3
}


def optimizer_bytes_per_param(optimizer: OptimizerKind, moments: MomentsDtype = MomentsDtype.FP32) -> int:
    """The optimizer's state per parameter (the ZeRO paper's K): fp32 master weights and the
    moments in ``moments``. Adam: 4 + 4 + 4 = 12 with fp32 moments, 4 + 2 + 2 = 8 with bf16 ones
    (DeepSeek-V3, arXiv 2412.19437 Sec 3.3.3); SGD with momentum and Muon: 4 + 4 = 8, or 4 + 2
    = 6."""
    return MASTER_BYTES_PER_PARAM + MOMENTS_PER_PARAM[optimizer] * MOMENT_BYTES[moments]


# With fp32 moments (every stack's default): fp32 master + momentum + variance = 4 + 4 + 4 for
# Adam, fp32 master + momentum = 4 + 4 for SGD.
OPTIMIZER_BYTES_PER_PARAM = {kind: optimizer_bytes_per_param(kind) for kind in OptimizerKind}
# Named reserve. CUDA context, cuBLAS workspaces and NCCL channel buffers take roughly 1 GiB per
# GPU with PyTorch (PyTorch CUDA-semantics notes: context 300-800 MiB depending on the CUDA
# version, cuBLAS workspace and NCCL buffers on top).
RUNTIME_RESERVE_BYTES = 1 * GIB_BYTES
# The caching allocator's fragmentation: blocks are rounded and split, so some reserved memory
# is unusable. A stack fact (TrainingSpec.allocator_fragmentation_fraction); this is the default
# where a stack has no measurement of its own.
FRAGMENTATION_FRACTION = DEFAULT_FRAGMENTATION_FRACTION


# FSDP's unsharded gradients under a pipeline accumulate in fp32 until the last micro-batch.
PIPELINED_GRAD_BYTES_PER_PARAM = 4


def pipelined_sharding(zero_stage: ZeroStage, pp_size: int) -> bool:
    """ZeRO-2/3 (FSDP) under a pipeline holds a stage's weights and gradients unsharded through
    the step. torchtitan does not reshard after forward when pipelining, "to avoid per-microbatch
    all-gathers" (torchtitan/distributed/fsdp.py get_fsdp_reshard_after_forward_policy:
    default = not pp_enabled), so the weights stay gathered; torch.distributed.pipelining syncs
    gradients only on the last micro-batch, so FSDP2 keeps the unsharded gradients, in fp32, until
    then. Only the optimizer states stay sharded: the memory of ZeRO-1 with fp32 gradients, and
    its traffic (one reduce-scatter and one all-gather a step). DeepSpeed and Megatron refuse
    ZeRO-2/3 with a pipeline (solver.frameworks)."""
    return zero_stage >= ZeroStage.OS_G and pp_size > 1


# torch.autocast over fp32 parameters: the fp32 parameters are the master weights (4 bytes),
# their gradients fp32 (4), and autocast casts each weight to 16 bit (2) once per forward; the copy
# stays alive until the autocast region ends (its cast cache: aten/src/ATen/autocast_mode.cpp
# cached_cast, "cache fp16 casts of fp32 model weights (leaves)") or, saved by the GEMM for
# backward, until the layer's backward. At the forward's end every weight's copy is alive.
AUTOCAST_MASTER_BYTES_PER_PARAM = 4
AUTOCAST_GRAD_BYTES_PER_PARAM = 4
AUTOCAST_COPY_BYTES_PER_PARAM = 2


def model_state_bytes(
    parameter_count: float, zero_stage: ZeroStage, dp_size: int, optimizer: OptimizerKind, pp_size: int = 1,
    grad_bytes_per_param: int = GRAD_BYTES_PER_PARAM, autocast_weights: bool = False, grad_bucket_copy: bool = False,
    moments: MomentsDtype = MomentsDtype.FP32,
) -> dict[str, float]:
    """Weights, gradients and optimizer states of ``parameter_count`` parameters on one GPU.

    ZeRO paper Sec 5.1: baseline (4 + K)*Psi; P_os 4*Psi + K*Psi/N_d; P_os+g 2*Psi + (2 + K)*Psi/N_d;
    P_os+g+p (4 + K)*Psi/N_d. Under a pipeline, ZeRO-2/3 holds weights and fp32 gradients
    unsharded (``pipelined_sharding``). Gradients take ``grad_bytes_per_param`` (the ZeRO paper's
    2, 16 bit; 4 where the stack keeps them in fp32: Megatron-LM's ``main_grad`` buffer for bf16,
    whose distributed optimizer then holds 6 + 12/d bytes per parameter, Megatron-LM
    docs/source/distrib_optimizer.md; FSDP's fp32 reduce dtype, whose sharded gradients are fp32;
    ``solver.spec.training.GradReduce``).

    ``autocast_weights`` (torch.autocast over fp32 parameters): the weights are the fp32 master
    copy plus autocast's 16-bit cast of each (4 + 2), the gradients fp32 (4) and the optimizer
    holds its moments alone (K - 4): 2 bytes per parameter more than a 16-bit model beside an fp32
    master, the cast copies (torch.amp autocast: aten/src/ATen/autocast_mode.cpp ``cached_cast``
    caches the cast of every leaf fp32 tensor that requires grad until the outermost autocast
    region exits; the GEMMs save the same copies for backward). ``grad_bucket_copy`` (PyTorch DDP
    without ``gradient_as_bucket_view``): the reducer's buckets, allocated when DDP wraps the
    model, are a second copy of the gradients (torch/nn/parallel/distributed.py: with the view
    "the saved memory size will be equal to the total gradients size"); replicated gradients only
    (ZeRO 0). ``moments``: the dtype of the optimizer's moments (``optimizer_bytes_per_param``):
    with bf16 moments and Megatron's fp32 main gradients, Adam's states add up to 2 + 4 + 8 = 14
    bytes per parameter unsharded instead of 18.
    """
    k = optimizer_bytes_per_param(optimizer, moments)
    weights = WEIGHT_BYTES_PER_PARAM * parameter_count
    gradients = grad_bytes_per_param * parameter_count
    states = k * parameter_count
    if autocast_weights:
        weights = (AUTOCAST_MASTER_BYTES_PER_PARAM + AUTOCAST_COPY_BYTES_PER_PARAM) * parameter_count
        gradients = AUTOCAST_GRAD_BYTES_PER_PARAM * parameter_count
        states = (k - AUTOCAST_MASTER_BYTES_PER_PARAM) * parameter_count
    if grad_bucket_copy and zero_stage is ZeroStage.NONE and dp_size > 1:
        gradients *= 2
    if zero_stage >= ZeroStage.OS:
        states /= dp_size
    if pipelined_sharding(zero_stage, pp_size):
        return {"weights": weights, "gradients": PIPELINED_GRAD_BYTES_PER_PARAM * parameter_count, "optimizer_states": states}
    if zero_stage >= ZeroStage.OS_G:
        gradients /= dp_size
    if zero_stage >= ZeroStage.OS_G_P:
        weights /= dp_size
    return {"weights": weights, "gradients": gradients, "optimizer_states": states}


def in_flight_micro_batches(stage: int, pp_size: int, virtual_stages: int, num_micro_batches: int) -> float:
    """Micro-batches whose activations stage ``stage`` holds at its peak, in units of all of the
    stage's layers for one micro-batch.

    1F1B: p - i (capped by the micro-batch count). Interleaved 1F1B (Megatron-LM's schedule):
    rank i runs (p - i - 1)*2 + (v - 1)*p warm-up chunk-forwards before its first backward, so it
    holds that many + 1 chunk activations, each 1/v of its layers: on the first stage this is
    p*(1 + (p - 1)/(p*v)) as in Korthikanti et al. 2022.
    """
    p, v, m = pp_size, virtual_stages, num_micro_batches
    if v == 1:
        return float(min(p - stage, m))
    chunks = min((p - stage - 1) * 2 + (v - 1) * p + 1, m * v)
    return chunks / v


def reserve_bytes(allocated_bytes: float, fragmentation_fraction: float = FRAGMENTATION_FRACTION) -> float:
    """Runtime reserve plus allocator fragmentation on top of ``allocated_bytes``: the caching
    allocator reserves ``fragmentation_fraction`` more than it has allocated at its peak (the
    stack's measured max_memory_reserved / max_memory_allocated - 1)."""
    return RUNTIME_RESERVE_BYTES + fragmentation_fraction * allocated_bytes


def optimizer_step_copy_bytes(shard_parameter_count: float, copy_bytes_per_param: int, sub_group_params: int) -> float:
    """The gradient copy the optimizer step holds beside the model states, at its largest: one
    sub-group's worth (``sub_group_params``; 0: the whole local shard) of ``copy_bytes_per_param``.

    DeepSpeed ZeRO-3 steps its local shard one sub-group at a time; for each it flattens the
    sub-group's 16-bit gradient partitions into a new tensor (2 bytes per parameter: the
    partitions stay in their contiguous buffer) and casts that to fp32 (4), so 6 bytes per
    parameter are alive until the flat copy is freed, and the fp32 one until the sub-group has
    stepped (deepspeed/runtime/zero/stage3.py ``_prepare_fp32_grad_for_sub_group`` and
    ``_release_sub_group``, unchanged from v0.3.15 to v0.14). The sub-group size is the
    ``sub_group_size`` setting: 1e9 parameters by default from v0.5.0 (runtime/zero/config.py
    at v0.7.0; constants.py before), 1e12 before, and 1e12 under PyTorch Lightning's
    DeepSpeedStrategy, whose own default it is. DeepSpeed's ZeRO-1/2 optimizer makes the same copy
    of its whole partition at once (runtime/zero/stage_1_and_2.py ``step``, v0.5.10 to v0.9:
    ``self.flatten(self.averaged_gradients[i]).to(fp32)`` for every parameter group before the
    inner optimizer steps), so there the sub-group is the partition (``stage.step_copy_bytes``).
    At ZeRO 0 DeepSpeed steps with its fp16 / bf16 optimizer instead, whose copy is not costed:
    runtime/fp16/fused_optimizer.py casts every gradient to fp32 and flattens the list (8 bytes per
    parameter of the stage), which would call vTrain's ZeRO-0 tp 1 runs infeasible although they
    ran (docs/wip/README.md). Activations and gathered weights are freed by then, so this peak
    stands beside the backward one, not on top of it (``stage.stage_cost``)."""
    if copy_bytes_per_param <= 0 or shard_parameter_count <= 0:
        return 0.0
    stepped = min(shard_parameter_count, sub_group_params) if sub_group_params > 0 else shard_parameter_count
    return copy_bytes_per_param * stepped


def optimizer_step_bytes_per_param(optimizer: OptimizerKind, moments: MomentsDtype = MomentsDtype.FP32) -> int:
    """HBM traffic of one optimizer step per parameter of the local shard.

    Adam: read fp32 master, momentum, variance (12) and the 16-bit gradient (2), write the three
    fp32 tensors (12) and the 16-bit weight (2), plus reading gradients once for the norm used
    in clipping (2) = 30. SGD with momentum: 8 + 2 + 8 + 2 + 2 = 22, and Muon's element-wise part
    the same (its Newton-Schulz GEMMs: solver.cost.muon). Moments kept in bf16
    (``moments``) are read and written at 2 bytes each instead of 4: Adam 30 - 8 = 22, SGD 22 - 4
    = 18 (Transformer Engine's FusedAdam computes in fp32 from the stored dtype).
    """
    fp32_moments = 30 if optimizer is OptimizerKind.ADAM else 22
    narrower = MOMENTS_PER_PARAM[optimizer] * (MOMENT_BYTES[MomentsDtype.FP32] - MOMENT_BYTES[moments])
    return fp32_moments - 2 * narrower  # each moment read once and written once


# Accumulating one micro-batch's 16-bit weight gradients into the fp32 main gradients reads
# the fp32 buffer (4), the new gradient (2) and writes the buffer (4): Megatron-LM's main_grad
# accumulation and PyTorch AMP's .grad accumulation both stream this per micro-batch.
GRAD_ACCUMULATION_BYTES_PER_PARAM = 10


ZERO3_PREFETCHED_LAYERS = 2  # the layer being computed and the next one, gathered ahead
