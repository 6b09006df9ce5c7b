"""One pipeline stage's time and memory per micro-batch: the only place their terms are written.

A stage (one GPU of a pipeline; all its chunks when interleaved) holds some transformer layers,
each either fully recomputed or not, plus the embedding on the first stage and the head on the
last ("extras"). Its time per micro-batch and its peak memory are

    time   = sum over layers of time_s(mode) + extras' time + gradient accumulation
    memory = in_flight x sum over layers of kept_bytes(mode) + backward working set
             + model states (ZeRO) + extras' activations + ZeRO-3 gather buffers + reserve

``stage_cost`` adds these up in floats for the evaluator; ``solver.partition.problem`` scales the
same terms to integers (ns, KiB) for the partition solvers, through the functions below, so that
a change to any term is made here once. Sources are in ``solver.cost.memory`` (model states,
in-flight micro-batches, reserve) and ``solver.cost.profile`` (per-layer terms).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from solver.cost.compute import elementwise_time_s
from solver.cost.memory import (
    FRAGMENTATION_FRACTION,
    GRAD_ACCUMULATION_BYTES_PER_PARAM,
    GRAD_BYTES_PER_PARAM,
    MOMENT_BYTES,
    WEIGHT_BYTES_PER_PARAM,
    ZERO3_PREFETCHED_LAYERS,
    model_state_bytes,
    optimizer_step_bytes_per_param,
    optimizer_step_copy_bytes,
    pipelined_sharding,
    reserve_bytes,
)
from solver.cost.offload import (
    checkpoint_buffer_bytes,
    gpu_model_states,
    host_bytes_per_gpu,
    nvme_bytes_per_gpu,
    offload_buffer_bytes,
    offloads_activations,
    offloads_params,
    streams_gradients,
)
from solver.cost.profile import LayerProfile
from solver.cost.result import StageMemory
from solver.spec.dimensions import NvmeOffload, Offload
from solver.spec.hardware import GpuSpec
from solver.spec.legality import stage_layer_counts
from solver.spec.model import ModelSpec
from solver.spec.parallel import ParallelConfig
from solver.spec.training import MomentsDtype, OptimizerKind, Recompute, TrainingSpec, ZeroStage


@dataclass(frozen=True)
class StageTime:
    """One micro-batch's time on one stage, in seconds, by kind of work."""

    forward_s: float
    backward_s: float
    recompute_s: float
    tp_comm_s: float
    grad_accumulation_s: float
    cp_comm_s: float = 0.0  # ring attention exchange not hidden by attention compute
    ep_comm_s: float = 0.0  # MoE token dispatch and combine all-to-alls

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.backward_s

    @property
    def total_s(self) -> float:
        return self.compute_s + self.recompute_s + self.tp_comm_s + self.cp_comm_s + self.grad_accumulation_s + self.ep_comm_s


@dataclass(frozen=True)
class StageCost:
    """What one stage costs per micro-batch, and what its data-parallel tail depends on."""

    time: StageTime
    memory: StageMemory
    parameter_count: int  # on this GPU (after TP, before ZeRO)
    largest_layer_parameter_count: int
    in_flight_micro_batches: float
    any_full_recompute: bool
    expert_parameter_count: int = 0  # of parameter_count, routed experts (sharded over tp x dp x cp / (ep x etp))
    host_bytes: float = 0.0  # host memory this GPU's offloaded states and checkpoints take (solver.cost.offload)
    offloaded_checkpoint_bytes: float = 0.0  # one micro-batch's activation checkpoints sent to the host
    # Partial activation offload: per layer, in execution order, (forward_s, backward_s, bytes sent
    # to the host); empty without it (solver.cost.offload.activation_offload_exposed_s).
    activation_offload: tuple[tuple[float, float, float], ...] = ()
    nvme_bytes: float = 0.0  # NVMe this GPU's offloaded states take (solver.cost.offload)
    # The buffers after backward (step_phases: the reduce's and the step's copies) that the peak
    # leaves to the backward's freed memory (step_copy_segment_bytes): the caching allocator's
    # reserve holds them beside that peak.
    step_segment_bytes: float = 0.0


@dataclass(frozen=True)
class StagePolicy:
    """What every stage of one configuration shares."""

    gpu: GpuSpec
    zero_stage: ZeroStage
    dp_size: int  # ranks ZeRO shards over and gradients are reduced over: dp x cp (ParallelConfig.dp_cp_size)
    optimizer: OptimizerKind
    num_micro_batches: int
    base_recompute: Recompute  # what layers not fully recomputed do: NONE or SELECTIVE
    pp_size: int = 1  # under a pipeline ZeRO-2/3 keeps weights and gradients unsharded (memory.pipelined_sharding)
    expert_dp: int = 0  # ranks routed experts' states shard over (ParallelConfig.expert_dp_size); 0: dp_size
    grad_bytes_per_param: int = GRAD_BYTES_PER_PARAM  # the stack's gradient dtype (TrainingSpec.grad_bytes_per_param)
    offload: Offload = Offload.NONE  # what lives in host memory (ParallelConfig.offload)
    activation_offload_layers: int = 0  # the stage's first N layers' activations go to the host
    autocast_weights: bool = False  # fp32 parameters under torch.autocast (TrainingSpec.autocast_weights)
    grad_bucket_copy: bool = False  # DDP's buckets beside the gradients (TrainingSpec.grad_bucket_copy)
    nvme_offload: NvmeOffload = NvmeOffload.NONE  # what of the offloaded states is on NVMe (ParallelConfig.nvme_offload)
    moments_dtype: MomentsDtype = MomentsDtype.FP32  # the optimizer's moments (TrainingSpec.moments_dtype)
    step_grad_copy_bytes_per_param: int = 0  # the optimizer step's gradient copy (TrainingSpec)
    optimizer_sub_group_params: int = 0  # what the step copies at a time; 0: the whole shard (TrainingSpec)
    fragmentation_fraction: float = FRAGMENTATION_FRACTION  # the allocator's overhead (TrainingSpec.allocator_fragmentation_fraction)
    reduce_cast_bytes_per_param: int = 0  # the gradient reduce's cast copy (TrainingSpec.reduce_cast_bytes_per_param)
    zero_reduce_bucket_params: int = 0  # DeepSpeed ZeRO-1/2's gradient bucket (TrainingSpec.zero_reduce_bucket_params)
    zero_step_norm_copies: bool = False  # DeepSpeed ZeRO-1/2's per-tensor check and norm copies (TrainingSpec)

    @staticmethod
    def of(gpu: GpuSpec, parallel: ParallelConfig, training: TrainingSpec, num_micro_batches: int) -> "StagePolicy":
        return StagePolicy(
            gpu, parallel.zero_stage, parallel.dp_cp_size, training.optimizer, num_micro_batches,
            Recompute.SELECTIVE if parallel.recompute is Recompute.SELECTIVE else Recompute.NONE,
            parallel.pp_size, parallel.expert_dp_size, training.grad_bytes_per_param, parallel.offload,
            parallel.activation_offload_layers, training.autocast_weights, training.grad_bucket_copy, parallel.nvme_offload,
            training.moments_dtype, training.step_grad_copy_bytes_per_param, training.optimizer_sub_group_params,
            training.allocator_fragmentation_fraction, training.reduce_cast_bytes_per_param,
            training.zero_reduce_bucket_params, training.zero_step_norm_copies,
        )

    @property
    def expert_dp_size(self) -> int:
        return self.expert_dp or self.dp_size


# --------------------------------------------------------------------------- the terms


def stage_chunks(model: ModelSpec, parallel: ParallelConfig) -> list[list[tuple[int, bool]]]:
    """Per pipeline stage (GPU), its transformer layers in execution order with a
    full-recompute flag each. Chunk c (pipeline order) runs on stage c % pp (Megatron-LM's
    interleaved assignment); within a chunk the first ``full_recompute_layers[c]`` layers are
    fully recomputed."""
    counts = stage_layer_counts(model, parallel)
    stages: list[list[tuple[int, bool]]] = [[] for _ in range(parallel.pp_size)]
    first = 0
    for chunk, count in enumerate(counts):
        if parallel.full_recompute_layers is not None:
            recomputed = parallel.full_recompute_layers[chunk]
        else:
            recomputed = count if parallel.recompute is Recompute.FULL else 0
        flagged = min(max(recomputed, 0), count)  # the chunk's layers i < recomputed
        stages[chunk % parallel.pp_size].extend(zip(range(first, first + count), [True] * flagged + [False] * (count - flagged)))
        first += count
    return stages


def accumulated_parameter_count(parameter_count: float, zero_stage: ZeroStage, dp_size: int, pp_size: int = 1) -> float:
    """Parameters whose gradients each backward adds into the fp32 buffer: all of them, or the
    local shard once ZeRO-2/3 reduce-scatter after every micro-batch (not under a pipeline, which
    reduces only after the last: ``memory.pipelined_sharding``)."""
    if zero_stage >= ZeroStage.OS_G and not pipelined_sharding(zero_stage, pp_size):
        return parameter_count / dp_size
    return parameter_count


def grad_accumulation_s(gpu: GpuSpec, parameter_count: float, policy: StagePolicy) -> float:
    """One micro-batch's gradient accumulation for ``parameter_count`` parameters (one kernel);
    nothing with a single micro-batch, whose gradients are the result, and nothing on the GPU
    where offload streams the gradients down as backward produces them, to be added into the
    host's fp32 buffer by the CPU beside the next micro-batch (``solver.cost.offload``)."""
    if policy.num_micro_batches <= 1 or streams_gradients(policy.offload, policy.zero_stage):
        return 0.0
    accumulated = accumulated_parameter_count(parameter_count, policy.zero_stage, policy.dp_size, policy.pp_size)
    return elementwise_time_s(gpu, GRAD_ACCUMULATION_BYTES_PER_PARAM * accumulated)


def zero3_gather_buffer_bytes(
    largest_layer_parameter_count: float, stage_parameter_count: float, zero_stage: ZeroStage, dp_size: int,
    pp_size: int = 1,
) -> float:
    """ZeRO-3 holds the gathered 16-bit weights of the layer in use and the one prefetched,
    never more than the unsharded weights it saves (``stage_parameter_count`` = inf: the bound
    before the stage's layers are known). Under a pipeline the weights stay gathered and are
    counted as weights (``memory.pipelined_sharding``): no buffer on top."""
    if zero_stage != ZeroStage.OS_G_P or dp_size <= 1 or pipelined_sharding(zero_stage, pp_size):
        return 0.0
    gathered = min(ZERO3_PREFETCHED_LAYERS * largest_layer_parameter_count, stage_parameter_count * (1 - 1 / dp_size))
    return gathered * WEIGHT_BYTES_PER_PARAM


def stage_buffer_bytes(largest_layer_parameter_count: float, stage_parameter_count: float, policy: StagePolicy) -> float:
    """The stage's parameter and gradient buffers: ZeRO-3's gathered weights, or with offload the
    buffers its transfers go through (``solver.cost.offload.offload_buffer_bytes``; parameter
    offload streams into the buffers ZeRO-3 would gather into, counted once)."""
    offload = offload_buffer_bytes(
        largest_layer_parameter_count, stage_parameter_count, policy.offload, policy.zero_stage, policy.grad_bytes_per_param
    )
    if offloads_params(policy.offload):
        return offload
    return offload + zero3_gather_buffer_bytes(
        largest_layer_parameter_count, stage_parameter_count, policy.zero_stage, policy.dp_size, policy.pp_size
    )


def extras_activation_bytes(
    in_flight: float, embedding: LayerProfile | None, head: LayerProfile | None, mode: Recompute = Recompute.NONE,
    working_bytes: float = 0.0,
) -> float:
    """Activations of the embedding (first stage, ``in_flight`` micro-batches of it) and of the
    head (last stage: it runs one micro-batch at a time, so one micro-batch of logits, and of a
    multi-token-prediction layer's activations, kept as ``mode`` keeps them), beyond the stage's
    recompute working set ``working_bytes``.

    The head's peak (the loss's tensors at the start of its backward) and a recomputed layer's
    working set are never alive together: autograd frees each node's saved tensors once its
    backward has run, so the loss's, the logits' gradient and the head's inputs are gone before
    the last transformer layer's backward unpacks its checkpoint and recomputes it
    (torch/utils/checkpoint.py: recomputation runs inside the layer's own backward node; Megatron's
    ``CheckpointFunction.backward`` likewise). The stage's peak holds the larger of the two, so the
    head adds what it holds beyond the working set (``activation_bytes`` counts the working set)."""
    head_bytes = max(0.0, head.kept_bytes(mode) - working_bytes) if head is not None else 0
    return (in_flight * embedding.activation_bytes if embedding is not None else 0) + head_bytes


def recompute_working_bytes(layer: LayerProfile, mode: Recompute = Recompute.FULL) -> int:
    """Recomputing a layer in backward materialises again what ``mode`` dropped, for that one
    layer: under full recompute all its activations beyond its input (the checkpoint, already
    counted as kept); under selective recompute what the selective policy did not keep (the
    attention scores of Korthikanti et al. 2022 without a fused kernel; under torchtitan's
    per-op policy the recomputed matmul outputs and element-wise results); nothing without."""
    if mode is Recompute.FULL:
        return layer.activation_bytes - layer.checkpoint_bytes
    if mode is Recompute.SELECTIVE:
        return max(0, layer.activation_bytes - layer.selective_activation_bytes)
    return 0


def working_bytes(layer: LayerProfile, mode: Recompute = Recompute.FULL) -> int:
    """What a layer holds at the peak of its own backward beyond what it keeps in ``mode``: its
    recompute working set (``recompute_working_bytes``) and the gradients its backward writes
    beside them (``LayerProfile.backward_working_bytes``, solver.cost.analytic
    ``backward_working_bytes``). Every mode has the second: without recomputation too, a layer's
    backward writes its input gradients before autograd frees what it saved."""
    return recompute_working_bytes(layer, mode) + layer.backward_working_bytes


def activation_bytes(in_flight: Any, kept_bytes: Any, working_bytes: Any) -> Any:
    """The stage's transformer activations at its peak: ``in_flight`` micro-batches of what its
    layers keep, plus one recomputed layer's working set. Written once for every form it is
    used in: floats (the evaluator), integers and numpy arrays (the partition solvers) and
    CP-SAT linear expressions."""
    return in_flight * kept_bytes + working_bytes


def state_bytes_per_parameter(parallel: ParallelConfig, training: TrainingSpec) -> float:
    """Bytes of model state per parameter on one GPU (weights + gradients + optimizer states),
    ZeRO sharding over the dp x cp ranks that hold the same parameters; what is offloaded is not
    on the GPU."""
    states = model_state_bytes(
        1.0, parallel.zero_stage, parallel.dp_cp_size, training.optimizer, parallel.pp_size, training.grad_bytes_per_param,
        training.autocast_weights, training.grad_bucket_copy, training.moments_dtype,
    )
    return sum(gpu_model_states(states, parallel.offload, parallel.zero_stage).values())


def expert_state_bytes_per_parameter(parallel: ParallelConfig, training: TrainingSpec) -> float:
    """``state_bytes_per_parameter`` for a routed expert's parameter: ZeRO shards it over the
    tp x dp x cp / (ep x etp) ranks that hold the same experts (``ParallelConfig.expert_dp_size``)."""
    states = model_state_bytes(
        1.0, parallel.zero_stage, parallel.expert_dp_size, training.optimizer, parallel.pp_size, training.grad_bytes_per_param,
        training.autocast_weights, training.grad_bucket_copy, training.moments_dtype,
    )
    return sum(gpu_model_states(states, parallel.offload, parallel.zero_stage).values())


def stage_state_bytes(parameter_count: float, expert_parameter_count: float, policy: StagePolicy) -> dict[str, float]:
    """Weights, gradients and optimizer states of a stage's ``parameter_count`` parameters on one
    GPU: the routed experts' ``expert_parameter_count`` of them sharded over the expert-data-parallel
    ranks (Megatron-core's distributed optimizer shards expert parameters over its expert
    data-parallel group), the rest over dp x cp."""
    flags = (policy.grad_bytes_per_param, policy.autocast_weights, policy.grad_bucket_copy, policy.moments_dtype)
    states = model_state_bytes(
        parameter_count - expert_parameter_count, policy.zero_stage, policy.dp_size, policy.optimizer, policy.pp_size, *flags
    )
    if expert_parameter_count:
        experts = model_state_bytes(expert_parameter_count, policy.zero_stage, policy.expert_dp_size, policy.optimizer, policy.pp_size, *flags)
        states = {key: states[key] + experts[key] for key in states}
    return states


def optimizer_step_s(gpu: GpuSpec, parameter_count: float, policy: StagePolicy, expert_parameter_count: float = 0) -> float:
    """The optimizer step over this GPU's shard (ZeRO-1+ shards the optimizer states; a routed
    expert's over the expert-data-parallel ranks)."""
    shard = optimizer_shard_parameter_count(parameter_count, policy, expert_parameter_count)
    return elementwise_time_s(gpu, optimizer_step_bytes_per_param(policy.optimizer, policy.moments_dtype) * shard, kernels=4)


def optimizer_shard_parameter_count(parameter_count: float, policy: StagePolicy, expert_parameter_count: float = 0) -> float:
    """Parameters whose optimizer states this GPU holds and steps: all of the stage's, or its ZeRO
    shard (ZeRO-1+; a routed expert's over the expert-data-parallel ranks)."""
    if policy.zero_stage >= ZeroStage.OS:
        return (parameter_count - expert_parameter_count) / policy.dp_size + expert_parameter_count / policy.expert_dp_size
    return parameter_count


# DeepSpeed's ZeRO-1/2 optimizer's per-tensor copies in its step, bytes per element: the overflow
# check sums an fp32 copy (``_has_inf_or_nan``: ``float(x.float().sum())``), then the norm takes
# that of an fp64 one (``get_grad_norm_direct``: ``g.data.double().norm(2)``), each of one
# gradient's partition at a time (deepspeed/runtime/zero/stage2.py v0.3.15-v0.4,
# stage_1_and_2.py v0.5-v0.9).
ZERO_CHECK_COPY_BYTES = 4
ZERO_NORM_COPY_BYTES = 8
# The 16-bit gradients DeepSpeed's ZeRO-1/2 buckets hold (the optimizer's ``self.dtype``).
ZERO_BUCKET_BYTES = 2
# Of DeepSpeed's step copy (``step_grad_copy_bytes_per_param``), the fp32 cast; the rest is the
# 16-bit flat partition it is cast from, alive beside it (``flatten(...).to(float32)``).
STEP_COPY_FP32_BYTES = 4


def _deepspeed_zero12(policy: StagePolicy) -> bool:
    """Whether DeepSpeed's ZeRO-1/2 optimizer steps on the GPU here: ZeRO-1/2 without offload,
    and not DeepSpeed's BF16_Optimizer (whose gradient reduce casts instead:
    ``reduce_cast_bytes_per_param``)."""
    return (
        policy.zero_stage in (ZeroStage.OS, ZeroStage.OS_G) and policy.offload is Offload.NONE
        and policy.reduce_cast_bytes_per_param == 0
    )


def step_phases(
    parameter_count: float, policy: StagePolicy, expert_parameter_count: float = 0, largest_tensor_count: float | None = None,
) -> tuple[tuple[float, ...], ...]:
    """The buffers a stage makes after its last backward, when the activations are freed, and
    frees before the next forward, in the order it makes them: a tuple per moment, of the buffers
    alive together then, in bytes. ``largest_tensor_count``: the stage's largest parameter tensor
    (``LayerProfile.largest_tensor_parameter_count``; None: the whole stage, an upper bound).

    - DeepSpeed's ZeRO-1 reduce: each bucket of up to ``zero_reduce_bucket_params`` 16-bit
      gradients flattened into a new tensor (``TrainingSpec.zero_reduce_bucket_params``);
    - DeepSpeed's BF16_Optimizer reduce: a bf16 copy of every fp32 gradient of the stage
      (``TrainingSpec.reduce_cast_bytes_per_param``);
    - DeepSpeed's ZeRO-1/2 step (``TrainingSpec.zero_step_norm_copies``): the overflow check's fp32
      copy, then the norm's fp64 copy, of one gradient's part of the optimizer's partition at a
      time, the largest min(largest tensor, partition);
    - the optimizer step's gradient copy over its ZeRO optimizer's shard
      (``memory.optimizer_step_copy_bytes``): ZeRO-3 one sub-group at a time, ZeRO-1/2 the whole
      partition (their step casts every parameter group's partition before stepping any;
      sub-groups are a ZeRO-3 setting), a 16-bit flat copy and its fp32 cast alive together. None
      at ZeRO 0, where a stack's plain fp16/bf16 optimizer steps instead (not costed), and none
      where the optimizer steps on the host (offload: DeepSpeed copies the gradients to the host's
      fp32 buffer instead, ``_prepare_sub_group``)."""
    phases: list[tuple[float, ...]] = []
    zero12 = _deepspeed_zero12(policy)
    if zero12 and policy.zero_stage is ZeroStage.OS and policy.zero_reduce_bucket_params:
        phases.append((ZERO_BUCKET_BYTES * min(float(policy.zero_reduce_bucket_params), parameter_count),))
    if policy.reduce_cast_bytes_per_param:
        phases.append((policy.reduce_cast_bytes_per_param * parameter_count,))
    if policy.offload is not Offload.NONE or policy.zero_stage is ZeroStage.NONE:
        return tuple(phases)
    shard = optimizer_shard_parameter_count(parameter_count, policy, expert_parameter_count)
    if zero12 and policy.zero_step_norm_copies:
        view = min(parameter_count if largest_tensor_count is None else largest_tensor_count, shard)
        phases += [(ZERO_CHECK_COPY_BYTES * view,), (ZERO_NORM_COPY_BYTES * view,)]
    sub_group = policy.optimizer_sub_group_params if policy.zero_stage is ZeroStage.OS_G_P else 0
    copy = optimizer_step_copy_bytes(shard, policy.step_grad_copy_bytes_per_param, sub_group)
    if copy:
        per_param = policy.step_grad_copy_bytes_per_param
        fp32 = copy * STEP_COPY_FP32_BYTES / per_param if per_param > STEP_COPY_FP32_BYTES else 0.0
        phases.append((copy - fp32, fp32) if fp32 else (copy,))
    return tuple(phases)


def most_held_bytes(phases: tuple[tuple[float, ...], ...]) -> float:
    """The most ``phases`` (``step_phases``) hold at one moment: what the peak compares with the
    backward's transient memory."""
    return max((sum(phase) for phase in phases), default=0.0)


def step_copy_bytes(
    parameter_count: float, policy: StagePolicy, expert_parameter_count: float = 0, largest_tensor_count: float | None = None,
) -> float:
    """``most_held_bytes`` of the stage's buffers after backward (``step_phases``)."""
    return most_held_bytes(step_phases(parameter_count, policy, expert_parameter_count, largest_tensor_count))


def zero_bucket_at_peak_bytes(policy: StagePolicy) -> float:
    """DeepSpeed ZeRO-2's contiguous gradient buffer, allocated at the start of every backward
    and held through it (``TrainingSpec.zero_reduce_bucket_params``): at the stage's peak."""
    if _deepspeed_zero12(policy) and policy.zero_stage is ZeroStage.OS_G:
        return float(ZERO_BUCKET_BYTES * policy.zero_reduce_bucket_params)
    return 0.0


def largest_tensor_count(layers: Iterable[LayerProfile]) -> int:
    """The largest parameter tensor among ``layers`` (``LayerProfile.largest_tensor_parameter_count``;
    a layer's whole parameter count where its profile does not say)."""
    return max((layer.largest_tensor_parameter_count or layer.parameter_count for layer in layers), default=0)


def new_segment_bytes(phases: tuple[tuple[float, ...], ...]) -> float:
    """Bytes of the segments PyTorch's caching allocator must cudaMalloc for ``phases``
    (``step_phases``) when no block the backward left cached is large enough for them (see
    ``step_copy_segment_bytes``): each buffer takes the smallest free block that holds it, split
    if larger, or a new segment of its own (c10/cuda/CUDACachingAllocator.cpp: best fit among
    cached blocks, blocks split and merged inside their segment); a moment's buffers are all freed
    before the next moment's are made, so every segment is whole again."""
    segments: list[float] = []
    for phase in phases:
        free = list(segments)
        for size in phase:
            fitting = [i for i, block in enumerate(free) if block >= size]
            if fitting:
                best = min(fitting, key=free.__getitem__)
                free[best] -= size
            else:
                segments.append(size)
    return sum(segments)


def step_peak_excess_bytes(copy_bytes: float, backward_transient_bytes: float) -> float:
    """What the optimizer step's copy adds to a stage's peak: the step runs after backward, when
    the activations, the head's and embedding's tensors and ZeRO-3's gathered weights
    (``backward_transient_bytes``) are freed, so the peak is the larger of the two moments and the
    step adds only its excess over the backward's transient memory."""
    return max(0.0, copy_bytes - backward_transient_bytes)


def step_copy_segment_bytes(phases: tuple[tuple[float, ...], ...], peak_excess_bytes: float) -> float:
    """The part of the buffers after backward (``step_phases``) that the peak
    (``step_peak_excess_bytes``) counts as reusing the backward's freed memory, but that PyTorch's
    caching allocator must reserve in segments of its own while it has room (``new_segment_bytes``).

    The buffers are flat: a reduce bucket, one gradient tensor's partition, or one fp16/bf16
    partition and its fp32 cast per parameter group (DeepSpeed's ``single_grad_partition``),
    hundreds of millions to billions of elements and so larger than any one activation tensor. The
    allocator serves a request from a cached block at least as large and never joins blocks of
    different segments (c10/cuda/CUDACachingAllocator.cpp: blocks split and merge only inside the
    segment one cudaMalloc made), so the activations' cached blocks cannot hold them: they take new
    segments, which later micro-batches' activations then split and reuse, and the reserve keeps
    both. Only where cudaMalloc fails does the allocator free its cached blocks and retry, so the
    buffers still fit wherever the peak does (what plans are checked against), while the reserve a run shows
    (``torch.cuda.max_memory_reserved``, nvidia-smi) is the peak plus these bytes, up to the GPU's
    capacity (``Evaluation.reserved_bytes``)."""
    return new_segment_bytes(phases) - peak_excess_bytes


# --------------------------------------------------------------------------- one stage


def stage_cost(
    layers: list[tuple[LayerProfile, bool]],
    embedding: LayerProfile | None,
    head: LayerProfile | None,
    in_flight: float,
    policy: StagePolicy,
) -> StageCost:
    """One stage's time per micro-batch and peak memory: ``layers`` are its transformer layers
    with their full-recompute flags; ``embedding`` / ``head`` are given on the stage that runs
    them."""
    base = policy.base_recompute
    extras = [layer for layer in (embedding, head) if layer is not None]
    # Runs of one layer object and flag (an analytic chain repeats one object per kind of
    # layer; a measured profile's layers all differ by name): what a layer adds is worked out
    # once per run, and each sum is ``sum`` over the per-layer values in order, as a sum over the
    # layers is (a float sum's value depends on its order).
    runs = [(layer, full, len(list(group))) for (layer, full), group in itertools.groupby(layers)]
    transformer_runs = len(runs)
    runs += [(layer, False, 1) for layer in extras]
    forward: list[float] = []
    backward: list[float] = []
    recompute: list[float] = []
    tp_comm: list[float] = []
    cp_comm: list[float] = []
    ep_comm: list[float] = []
    parameters: list[int] = []
    expert_parameters: list[int] = []
    kept_per_layer: list[int] = []
    working_per_run: list[int] = []
    for index, (layer, full, count) in enumerate(runs):
        mode = Recompute.FULL if full else base
        forward += [layer.forward_s] * count
        backward += [layer.backward_s] * count
        recompute += [layer.recompute_s(mode)] * count
        tp_comm += [layer.tp_comm_s] * count
        cp_comm += [layer.cp_comm_s] * count
        ep_comm += [layer.ep_comm_s] * count
        parameters += [layer.parameter_count] * count
        expert_parameters += [layer.expert_parameter_count] * count  # a head's MTP layer has experts
        if index < transformer_runs:
            kept_per_layer += [layer.kept_bytes(mode)] * count
            working_per_run.append(working_bytes(layer, mode))
    params = sum(parameters)
    time = StageTime(
        forward_s=sum(forward),
        backward_s=sum(backward),
        recompute_s=sum(recompute),
        tp_comm_s=sum(tp_comm),
        grad_accumulation_s=grad_accumulation_s(policy.gpu, params, policy),
        cp_comm_s=sum(cp_comm),
        ep_comm_s=sum(ep_comm),
    )
    largest = max(parameters, default=0)
    experts = sum(expert_parameters)
    held = stage_state_bytes(params, experts, policy)
    if policy.optimizer is OptimizerKind.MUON:
        # Muon leaves the embedding and the output layer to Adam, whose second moment they keep
        # on the optimizer's shard (solver.cost.muon; 1-D norms and biases left out).
        adam_stepped = optimizer_shard_parameter_count(sum(layer.parameter_count for layer in extras), policy)
        held = {**held, "optimizer_states": held["optimizer_states"] + MOMENT_BYTES[policy.moments_dtype] * adam_stepped}
    states = gpu_model_states(held, policy.offload, policy.zero_stage)
    # Activation offload sends the checkpoints of fully recomputed layers to the host.
    offloaded = [layer.checkpoint_bytes for layer, full in layers if full] if offloads_activations(policy.offload) else []
    kept = sum(kept_per_layer) - sum(offloaded)
    # Partial activation offload: the first N layers' activations leave the GPU (legal only
    # without recomputation, on one stage).
    moved = [layer.kept_bytes(base) if i < policy.activation_offload_layers else 0 for i, (layer, _) in enumerate(layers)]
    kept -= sum(moved)
    working = max(working_per_run, default=0)
    bucket = zero_bucket_at_peak_bytes(policy)
    allocated = dict(
        weights=states["weights"],
        gradients=states["gradients"] + bucket,
        optimizer_states=states["optimizer_states"],
        activations=activation_bytes(in_flight, kept, working) + checkpoint_buffer_bytes(max(offloaded, default=0), policy.offload),
        embedding_and_logits=extras_activation_bytes(in_flight, embedding, head, base, working),
        zero3_gather_buffers=stage_buffer_bytes(largest, params, policy),
    )
    # ZeRO-2's bucket (in the gradients) is freed with the activations before the step.
    transient = allocated["activations"] + allocated["embedding_and_logits"] + allocated["zero3_gather_buffers"] + bucket
    phases = step_phases(params, policy, experts, largest_tensor_count(layer for layer, _, _ in runs))
    allocated["optimizer_step_copy"] = step_peak_excess_bytes(most_held_bytes(phases), transient)
    # The allocator's fragmentation is a fraction of the backward's peak, where the stacks' figures
    # were measured (memory.reserve_bytes); the step's excess is whole flat buffers beside it.
    memory = StageMemory(
        **allocated, reserve=reserve_bytes(sum(allocated.values()) - allocated["optimizer_step_copy"], policy.fragmentation_fraction)
    )
    host = host_bytes_per_gpu(held["optimizer_states"], policy.optimizer, policy.offload, policy.nvme_offload, policy.moments_dtype) + in_flight * (
        sum(offloaded) + sum(moved)
    )
    nvme = nvme_bytes_per_gpu(held["optimizer_states"], policy.optimizer, policy.offload, policy.nvme_offload, policy.moments_dtype)
    activation_offload = tuple((layer.forward_s, layer.backward_s, bytes_) for (layer, _), bytes_ in zip(layers, moved)) if any(moved) else ()
    return StageCost(
        time, memory, params, largest, in_flight, any(full for _, full in layers), experts, host, sum(offloaded), activation_offload,
        nvme, step_copy_segment_bytes(phases, allocated["optimizer_step_copy"]),
    )
