"""Step time of the pipeline schedule and of the data-parallel synchronisation around it.

Sources: Narayanan et al. 2021 Sec 2.2: 1F1B takes (m + p - 1) slots of the slowest stage's
forward+backward time; the interleaved schedule shrinks the bubble to (p - 1)/(v*m) of the ideal
time and multiplies pipeline communication by v. ZeRO (Rajbhandari et al. 2020) Sec 7: ZeRO-1/2
move the same 2*Psi as an all-reduce; ZeRO-3 adds a parameter all-gather in forward and in
backward (3*Psi). Gradient buckets are reduced while the last micro-batch's backward runs
(PyTorch DDP, Li et al. 2020, VLDB); ZeRO-3 prefetches the next layer's parameters during the
current layer's compute (FSDP; DeepSpeed from v0.7), so only what compute cannot cover is
exposed, and compute runs slower beside collectives (Lee et al. 2025, ``overlapped_exposed_s``).
DualPipe (DeepSeek-V3 report, arXiv 2412.19437 Sec 3.2.1 and Table 2): bubble
(PP/2 - 1)(F&B + B - 3W) against 1F1B's (PP - 1)(F + B), pipeline sends hidden beside compute.
"""

from __future__ import annotations

from solver.cost.comm import data_parallel_collective_s, overlapped_exposed_s, p2p_s, pp_link
from solver.cost.memory import (
    GRAD_BYTES_PER_PARAM,
    PIPELINED_GRAD_BYTES_PER_PARAM,
    WEIGHT_BYTES_PER_PARAM,
    pipelined_sharding,
)
from solver.spec.errors import SpecError
from solver.spec.hardware import ClusterSpec
from solver.spec.parallel import ParallelConfig
from solver.spec.training import PipelineSchedule, ZeroStage

# The weight-gradient share W / B of a backward pass, for DualPipe's bubble, where the profile
# does not split backward: a linear layer's backward is two GEMMs, each of its forward's FLOPs,
# one for the input gradient (dX = dY W^T) and one for the weight gradient (dW = X^T dY), so
# W = B/2. The attention core (scores and context, FlashAttention's backward) has no weights, so
# this overstates W by half of the attention core's share of B, which shortens the bubble.
WEIGHT_GRAD_SHARE_OF_BACKWARD = 0.5


def pipeline_bubble_fraction(pp_size: int, virtual_stages: int, num_micro_batches: int) -> float:
    """Bubble time over ideal time: (p - 1) / (v * m)."""
    return (pp_size - 1) / (virtual_stages * num_micro_batches)


def pipeline_slots(pp_size: int, virtual_stages: int, num_micro_batches: int) -> float:
    """Slots of the slowest stage's per-micro-batch time that one step's schedule takes:
    m + (p - 1)/v (1F1B, and interleaved 1F1B with v chunks per stage)."""
    return num_micro_batches + (pp_size - 1) / virtual_stages


def pipeline_time_s(slowest_stage_s: float, pp_size: int, virtual_stages: int, num_micro_batches: int) -> tuple[float, float]:
    """(busy time, bubble time) of one step: m * t_max and (p - 1)/v * t_max, which add up to
    ``pipeline_slots`` x t_max."""
    busy = num_micro_batches * slowest_stage_s
    return busy, busy * pipeline_bubble_fraction(pp_size, virtual_stages, num_micro_batches)


def one_f_one_b_bubble_s(pp_size: int, forward_s: float, backward_s: float) -> float:
    """1F1B's bubble in seconds: (PP - 1)(F + B), F and B one micro-batch's forward and backward
    on a stage (DeepSeek-V3 report Table 2; Narayanan et al. 2021 Sec 2.2)."""
    return (pp_size - 1) * (forward_s + backward_s)


def dualpipe_bubble_s(pp_size: int, forward_and_backward_s: float, backward_s: float, weight_grad_s: float) -> float:
    """DualPipe's bubble in seconds (DeepSeek-V3 report, arXiv 2412.19437 Table 2):
    (PP/2 - 1)(F&B + B - 3W), where F&B is one forward chunk and one backward chunk of two
    micro-batches run overlapped, B one backward chunk and W its weight-gradient part, all on the
    slowest stage."""
    return (pp_size / 2 - 1) * (forward_and_backward_s + backward_s - 3 * weight_grad_s)


def check_pipeline_schedule(schedule: PipelineSchedule, pp_size: int, virtual_stages: int, num_micro_batches: int) -> None:
    """Raise SpecError where the schedule cannot run the split: DualPipe needs an even pipeline
    and an even micro-batch count (DeepSeek-V3 report Sec 3.2.1: "DualPipe only requires that the
    pipeline stages and micro-batches be divisible by 2") and places its two chunks per rank
    itself, so no interleaving."""
    if schedule is not PipelineSchedule.DUALPIPE:
        return
    if pp_size < 2 or pp_size % 2:
        raise SpecError("parallel.pp_size", f"DualPipe needs an even pipeline of at least 2 stages, got pp_size {pp_size}")
    if num_micro_batches % 2:
        raise SpecError("parallel.micro_batch_size", f"DualPipe needs an even micro-batch count, got {num_micro_batches}")
    if virtual_stages != 1:
        raise SpecError("parallel.virtual_stages", f"DualPipe places two chunks per rank itself: virtual_stages must be 1, got {virtual_stages}")


def dualpipe_time_s(
    stage_s: float, backward_s: float, recompute_s: float, pp_size: int, num_micro_batches: int
) -> tuple[float, float]:
    """(busy time, bubble time) of one DualPipe step on the slowest stage: every rank runs each of
    the m micro-batches through one stage's layers (half of them in each direction), so m x
    ``stage_s``, where ``stage_s`` is a forward and a backward with what their overlap costs
    (F&B); the bubble is ``dualpipe_bubble_s`` with B the backward and its recomputed forward, and
    W = ``WEIGHT_GRAD_SHARE_OF_BACKWARD`` x the backward (the profile has no weight-gradient
    split). Each rank pairs stage i with stage p-1-i; the slowest stage bounds both."""
    weight_grad_s = WEIGHT_GRAD_SHARE_OF_BACKWARD * backward_s
    return num_micro_batches * stage_s, dualpipe_bubble_s(pp_size, stage_s, backward_s + recompute_s, weight_grad_s)


def pipeline_comm_s(
    cluster: ClusterSpec, parallel: ParallelConfig, num_micro_batches: int, message_bytes: float,
    overlap: bool = False, busy_s: float = 0.0, dualpipe: bool = False,
) -> float:
    """Point-to-point time on the critical path: every micro-batch sends its activations forward
    and its gradient backward across each of the slowest stage's v chunk boundaries; fill and
    drain add p - 1 more exchanges. Megatron-LM's p2p sends are not overlapped with compute.
    ``overlap``: the interleaved schedule posts each steady-state exchange beside the next
    chunk's compute (Megatron-core's ``overlap_p2p_comm``, interleaved schedule only), so those
    m v exchanges cost only what they take from the ``busy_s`` of compute they run beside
    (``overlapped_exposed_s``); fill and drain stay exposed. ``dualpipe``: DualPipe runs each
    micro-batch's sends beside the other direction's compute (DeepSeek-V3 report Sec 3.2.1: "both
    all-to-all and PP communication can be fully hidden"), costed the same way."""
    if parallel.pp_size == 1:
        return 0.0
    link = pp_link(cluster, parallel.tp_size, parallel.dp_size, parallel.pp_size, parallel.cp_size)
    exchange_s = 2 * p2p_s(message_bytes, link)
    steady_s = num_micro_batches * parallel.virtual_stages * exchange_s
    fill_drain_s = (parallel.pp_size - 1) * exchange_s
    if overlap and (parallel.virtual_stages > 1 or dualpipe):
        return overlapped_exposed_s(steady_s, busy_s, cluster.gpu.overlap_slowdown) + fill_drain_s
    return steady_s + fill_drain_s


def data_parallel_exposed_s(
    cluster: ClusterSpec,
    parallel: ParallelConfig,
    num_micro_batches: int,
    stage_parameter_count: float,
    largest_layer_parameter_count: float,
    forward_s: float,
    backward_s: float,
    regather_for_recompute: bool = False,
    overlap_grad_reduce: bool = True,
    zero3_collectives_per_pass: float = 1,
    zero3_overlap: bool = True,
) -> float:
    """Seconds of one step's data-parallel gradient synchronisation and ZeRO parameter gathers,
    for one stage's DP group, that compute does not hide.

    ``forward_s`` / ``backward_s`` are one micro-batch's compute on this stage: the time that can
    hide collectives running on the side, at the cost of running slower beside them
    (``overlapped_exposed_s``). ``regather_for_recompute``: ZeRO-3 gathers the
    parameters a third time for the recomputed forward (DeepSpeed's checkpointing re-enters the
    gather hooks; FSDP keeps the backward gather for both). ``overlap_grad_reduce`` False: the
    framework reduces gradients only after backward ends, so none of it is hidden (ZeRO 0-2).
    ZeRO-3 issues ``zero3_collectives_per_pass`` all-gathers per gather pass over the stage's
    parameters, and as many reduce-scatters (one per layer or one per parameter tensor,
    ``solver.spec.training.Zero3Collectives``), each paying its ring's latency;
    ``zero3_overlap`` False: each gather and reduce-scatter runs on the compute stream and is
    waited for, so none of it is hidden.

    With context parallelism the group is the dp x cp ranks that hold the same parameters
    (``ParallelConfig.dp_cp_size``): each CP rank's gradients cover only its part of every
    sequence, so they are reduced over the CP ranks too, and ZeRO shards over all of them.
    """
    if parallel.dp_cp_size == 1:
        return 0.0
    slowdown = cluster.gpu.overlap_slowdown

    def collective(kind: str, parameter_count: float, bytes_per_param: int, calls: float = 1) -> float:
        return data_parallel_collective_s(
            cluster, parallel.tp_size, parallel.dp_size, bytes_per_param * parameter_count, kind, calls, parallel.cp_size
        )

    def beside_backward(sync_s: float) -> float:
        """A gradient sync run bucket by bucket during backward: what it adds to backward,
        plus the last bucket, reduced after backward ends."""
        if not overlap_grad_reduce:
            return sync_s
        return overlapped_exposed_s(sync_s, backward_s, slowdown) + _last_bucket(
            sync_s, stage_parameter_count, largest_layer_parameter_count
        )

    zero, grad_bytes = parallel.zero_stage, GRAD_BYTES_PER_PARAM
    if pipelined_sharding(zero, parallel.pp_size):
        # FSDP under a pipeline syncs as ZeRO-1 does, with fp32 gradients: reduce-scattered once,
        # after the last micro-batch's backward, and the updated weights gathered once a step.
        zero, grad_bytes = ZeroStage.OS, PIPELINED_GRAD_BYTES_PER_PARAM
    if zero == ZeroStage.NONE:
        return beside_backward(collective("all_reduce", stage_parameter_count, grad_bytes))
    if zero in (ZeroStage.OS, ZeroStage.OS_G):
        grads_rs = collective("reduce_scatter", stage_parameter_count, grad_bytes)
        params_ag = collective("all_gather", stage_parameter_count, WEIGHT_BYTES_PER_PARAM)
        # ZeRO-1 reduce-scatters gradients during the last backward; ZeRO-2 after every
        # micro-batch's backward (no full gradient is kept). Both gather the updated parameters
        # after the step.
        syncs = num_micro_batches if zero == ZeroStage.OS_G else 1
        return syncs * beside_backward(grads_rs) + params_ag
    # ZeRO-3: every micro-batch gathers parameters for forward and again for backward (a third
    # time for a recomputed forward), and reduce-scatters its gradients.
    calls = zero3_collectives_per_pass
    gather = collective("all_gather", stage_parameter_count, WEIGHT_BYTES_PER_PARAM, calls)
    scatter = collective("reduce_scatter", stage_parameter_count, grad_bytes, calls)
    backward_gathers = 2 if regather_for_recompute else 1
    if not zero3_overlap:
        return num_micro_batches * ((1 + backward_gathers) * gather + scatter)
    # Prefetched on their own stream: the first layer's gather cannot be.
    first_gather = collective("all_gather", largest_layer_parameter_count, WEIGHT_BYTES_PER_PARAM)
    per_micro_batch = (
        overlapped_exposed_s(gather, forward_s, slowdown)
        + overlapped_exposed_s(backward_gathers * gather + scatter, backward_s, slowdown)
        + first_gather
    )
    return num_micro_batches * per_micro_batch


def _last_bucket(collective_s: float, stage_parameter_count: float, largest_layer_parameter_count: float) -> float:
    """The last gradient bucket (about one layer's gradients) is reduced after backward ends."""
    if stage_parameter_count <= 0:
        return 0.0
    return collective_s * min(1.0, largest_layer_parameter_count / stage_parameter_count)
