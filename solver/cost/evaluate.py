"""The evaluator: one configuration in, predicted step time, throughput and memory out.

It is the single source of truth for time and memory; the optimizer and the validator call it.
Everything it adds up comes from the per-layer profile (analytic or measured), the stage terms
of ``solver.cost.stage`` and the formulas in ``solver.cost.schedule`` and ``solver.cost.memory``,
each with its source. The steps: ``stage_costs`` (per stage, per micro-batch), ``step_time``
(the schedule and the data-parallel tail), ``throughput`` (tokens/s, FLOP rates, MFU) and
``violations`` (what does not fit or cannot run), over one ``Policy``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from solver.cost.derive import resolve_profile
from solver.cost.flops import (
    embedding_parameter_tensor_count,
    hardware_flops_per_iteration,
    head_parameter_tensor_count,
    layer_parameter_tensor_count,
    model_flops_per_iteration,
)
from solver.cost.memory import GIB_BYTES, in_flight_micro_batches
from solver.cost.muon import muon_step_s
from solver.cost.offload import (
    activation_offload_exposed_s,
    gpus_sharing_host,
    host_copy_bytes_per_s,
    offload_exposed_s,
    offload_step_s,
)
from solver.cost.profile import LayerChain, ModelProfile, ProfileShape
from solver.cost.result import Evaluation, Prediction, StageReport, StepBreakdown
from solver.cost.schedule import (
    check_pipeline_schedule,
    data_parallel_exposed_s,
    dualpipe_time_s,
    pipeline_comm_s,
    pipeline_time_s,
)
from solver.cost.stage import (
    StageCost,
    StagePolicy,
    optimizer_shard_parameter_count,
    optimizer_step_s,
    stage_chunks,
    stage_cost,
)
from solver.cost.uncertainty import ErrorBand, prediction_range
from solver.frameworks import framework_violations
from solver.spec.dimensions import Offload
from solver.spec.errors import SpecError, check_in_range
from solver.spec.hardware import ClusterSpec
from solver.spec.legality import check_structure, placement_violations
from solver.spec.model import ModelSpec
from solver.spec.parallel import ParallelConfig, micro_batch_count
from solver.spec.rules import Rule, Violation
from solver.spec.training import Framework, OptimizerKind, PipelineSchedule, TrainingSpec, Zero3Collectives, ZeroStage

# The usable share of GPU memory: from 0.1% (below it not even the runtime reserve fits any GPU the
# specs admit) to all of it.
MEMORY_FRACTION_RANGE = (1e-3, 1.0)


@dataclass(frozen=True)
class Policy:
    """What a request adds to a configuration: the framework whose rules and mechanics apply,
    whether tensor parallelism may span nodes, and the share of GPU memory that may be used."""

    framework: Framework = Framework.ANY
    allow_tp_across_nodes: bool = True
    max_memory_fraction: float = 1.0

    def __post_init__(self) -> None:
        check_in_range("constraints.max_memory_fraction", self.max_memory_fraction, *MEMORY_FRACTION_RANGE)


@dataclass(frozen=True)
class _Tail:
    """After the last backward each stage syncs its own gradients and steps its optimizer."""

    dp_exposed_s: float
    optimizer_s: float


def evaluate(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    parallel: ParallelConfig,
    num_gpus: int | None = None,
    profile: ModelProfile | None = None,
    framework: Framework = Framework.ANY,
    allow_tp_across_nodes: bool = True,
    max_memory_fraction: float = 1.0,
    error_band: ErrorBand | None = None,
) -> Evaluation:
    """Predict one configuration. Raises SpecError when it is structurally illegal; returns an
    Evaluation with ``feasible=False`` and named violations when it is legal but does not fit
    or the framework cannot run it."""
    policy = Policy(framework, allow_tp_across_nodes, max_memory_fraction)
    num_gpus = num_gpus or parallel.num_gpus
    check_structure(model, cluster, training, parallel, num_gpus)
    prof = resolve_profile(model, cluster, training, ProfileShape.of(parallel), profile)
    if len(prof.transformer_layers) != model.num_layers:
        raise SpecError("profile.layers", f"the profile has {len(prof.transformer_layers)} transformer layers, the model {model.num_layers}")

    m = micro_batch_count(training.global_batch_size, parallel.dp_size, parallel.micro_batch_size)
    check_pipeline_schedule(training.pipeline_schedule, parallel.pp_size, parallel.virtual_stages, m)
    chunks = stage_chunks(model, parallel)
    stage_policy = StagePolicy.of(cluster.gpu, parallel, training, m)
    costs = stage_costs(prof, chunks, parallel, stage_policy)
    tails = [
        _tail(
            cost, cluster, training, parallel, stage_policy, policy,
            zero3_collectives_per_pass(model, training, parallel, stage, layers), num_gpus,
            _muon_step_s(model, cluster, training, parallel, stage_policy, layers),
        )
        for stage, (cost, layers) in enumerate(zip(costs, chunks))
    ]
    step_s, breakdown = step_time(
        costs, tails, prof, cluster, parallel, m, training.overlap_p2p_comm, training.pipeline_schedule
    )
    recomputed_layers = sum(full for layers in chunks for _, full in layers)
    reports = tuple(
        StageReport(
            stage=stage,
            layers=tuple(i for i, _ in layers),
            full_recompute_layers=tuple(i for i, full in layers if full),
            has_embedding=stage == 0 and prof.embedding is not None,
            has_head=stage == parallel.pp_size - 1 and prof.head is not None,
            time_per_micro_batch_s=cost.time.total_s,
            in_flight_micro_batches=cost.in_flight_micro_batches,
            memory_bytes=cost.memory,
            parameter_count=cost.parameter_count,
            step_segment_bytes=cost.step_segment_bytes,
        )
        for stage, (layers, cost) in enumerate(zip(chunks, costs))
    )
    host_bytes_per_node = max(cost.host_bytes for cost in costs) * gpus_sharing_host(cluster, num_gpus)
    nvme_bytes_per_node = max(cost.nvme_bytes for cost in costs) * gpus_sharing_host(cluster, num_gpus)
    found = (
        violations(reports, cluster, parallel, policy) + host_violations(cluster, host_bytes_per_node)
        + nvme_violations(cluster, nvme_bytes_per_node)
    )
    prediction = throughput(model, cluster, training, parallel, num_gpus, step_s, breakdown, recomputed_layers)
    if error_band is not None:
        prediction = replace(
            prediction,
            range=prediction_range(prediction.tokens_per_s, prediction.step_time_s, prediction.time_to_train_s, error_band),
        )
    return Evaluation(
        feasible=not found,
        violations=tuple(found),
        prediction=prediction,
        stages=reports,
        capacity_bytes=cluster.gpu.memory_bytes,
        peak_stage=max(range(parallel.pp_size), key=lambda i: reports[i].peak_bytes),
        num_micro_batches=m,
        profile_origins=prof.origins() if profile is not None else {},
        host_bytes_per_node=host_bytes_per_node,
        nvme_bytes_per_node=nvme_bytes_per_node,
    )


def stage_costs(
    prof: LayerChain, chunks: list[list[tuple[int, bool]]], parallel: ParallelConfig, policy: StagePolicy
) -> list[StageCost]:
    """Every pipeline stage's time per micro-batch and peak memory (``solver.cost.stage``)."""
    pp, v, num_micro_batches = parallel.pp_size, parallel.virtual_stages, policy.num_micro_batches
    blocks = prof.transformer_layers
    return [
        stage_cost(
            [(blocks[i], full) for i, full in layers],
            prof.embedding if stage == 0 else None,
            prof.head if stage == pp - 1 else None,
            in_flight_micro_batches(stage, pp, v, num_micro_batches),
            policy,
        )
        for stage, layers in enumerate(chunks)
    ]


def zero3_collectives_per_pass(
    model: ModelSpec, training: TrainingSpec, parallel: ParallelConfig, stage: int, layers: list[tuple[int, bool]]
) -> int:
    """How many all-gathers one ZeRO-3 gather pass over this stage's parameters issues: one per
    transformer layer and one for the embedding and head it holds (FSDP's flat parameters), or
    one per parameter tensor (DeepSpeed v0.3-v0.6)."""
    extras = [stage == 0, stage == parallel.pp_size - 1]
    if training.zero3_collectives is Zero3Collectives.PER_LAYER:
        return len(layers) + sum(extras)
    return (
        len(layers) * layer_parameter_tensor_count(model)
        + (embedding_parameter_tensor_count(model) if extras[0] else 0)
        + (head_parameter_tensor_count(model) if extras[1] else 0)
    )


def _muon_step_s(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, parallel: ParallelConfig, stage_policy: StagePolicy,
    layers: list[tuple[int, bool]],
) -> float:
    """Muon's orthogonalisation on one GPU of the stage holding ``layers`` (``solver.cost.muon``;
    0 for other optimizers): its matrices shared over the data-parallel ranks where the optimizer
    is distributed (ZeRO-1 and up: Megatron-core's layer-wise distributed optimizer)."""
    if training.optimizer is not OptimizerKind.MUON:
        return 0.0
    return muon_step_s(
        model, cluster, [i for i, _ in layers], parallel.tp_size, stage_policy.dp_size, parallel.ep_size,
        stage_policy.expert_dp_size, distributed=parallel.zero_stage >= ZeroStage.OS, tp_mode=training.muon_tp_mode,
        expert_tp_size=parallel.etp_size,
    )


def _tail(
    cost: StageCost, cluster: ClusterSpec, training: TrainingSpec, parallel: ParallelConfig, stage_policy: StagePolicy,
    policy: Policy, zero3_calls: int, num_gpus: int, muon_s: float = 0.0,
) -> _Tail:
    """One stage's data-parallel synchronisation not hidden by compute, and its optimizer step
    (with Muon's orthogonalisation, ``muon_s``, on top of its element-wise step). With offload
    (``solver.cost.offload``) the step is the CPU's, and the PCIe transfers that compute does not
    hide are counted with the data-parallel traffic (they move the same shard that ZeRO reduces
    and gathers)."""
    time = cost.time

    def exposed_s(group: ParallelConfig, parameter_count: float) -> float:
        return data_parallel_exposed_s(
            cluster, group, stage_policy.num_micro_batches, parameter_count, cost.largest_layer_parameter_count,
            time.forward_s, time.backward_s + time.recompute_s,
            regather_for_recompute=policy.framework is Framework.DEEPSPEED and cost.any_full_recompute,
            overlap_grad_reduce=training.overlap_grad_reduce,
            zero3_collectives_per_pass=zero3_calls,
            zero3_overlap=training.zero3_overlap,
        )

    experts = cost.expert_parameter_count
    exposed = exposed_s(parallel, cost.parameter_count - experts)
    if experts:
        exposed += exposed_s(expert_gradient_group(parallel), experts)
    if cost.activation_offload:
        rate = host_copy_bytes_per_s(cluster, num_gpus)
        exposed += stage_policy.num_micro_batches * activation_offload_exposed_s(cost.activation_offload, rate)
    if parallel.offload is Offload.NONE:
        return _Tail(exposed, optimizer_step_s(cluster.gpu, cost.parameter_count, stage_policy, experts) + muon_s)
    shard = optimizer_shard_parameter_count(cost.parameter_count, stage_policy, experts)
    layer_shard = cost.largest_layer_parameter_count * shard / cost.parameter_count if cost.parameter_count else 0.0
    exposed += stage_policy.num_micro_batches * offload_exposed_s(
        cluster, parallel.offload, parallel.zero_stage, shard, layer_shard, time.forward_s, time.backward_s + time.recompute_s,
        stage_policy.grad_bytes_per_param, cost.offloaded_checkpoint_bytes, parallel.nvme_offload, num_gpus,
    )
    step_s = offload_step_s(
        cluster, parallel.offload, parallel.zero_stage, shard, training.optimizer, num_gpus, stage_policy.grad_bytes_per_param,
        parallel.nvme_offload, training.moments_dtype,
    )
    return _Tail(exposed, step_s)


def expert_gradient_group(parallel: ParallelConfig) -> ParallelConfig:
    """The group routed experts' gradients are reduced (and their ZeRO states sharded) over, as
    a configuration ``data_parallel_exposed_s`` reads: the tp x dp x cp / (ep x etp) ranks that
    hold the same experts (``ParallelConfig.expert_dp_size``), etp x ep ranks apart (Megatron-core's
    expert rank grid tp-ep-dp-pp with etp in tp's place: its expert data-parallel group strides
    over whole expert groups)."""
    return replace(
        parallel, tp_size=parallel.etp_size * parallel.ep_size, dp_size=parallel.expert_dp_size, cp_size=1, ep_size=1,
        expert_tp_size=None,
    )


def step_time(
    costs: list[StageCost],
    tails: list[_Tail],
    prof: LayerChain,
    cluster: ClusterSpec,
    parallel: ParallelConfig,
    num_micro_batches: int,
    overlap_p2p_comm: bool = False,
    schedule: PipelineSchedule = PipelineSchedule.ONE_F_ONE_B,
) -> tuple[float, StepBreakdown]:
    """One step: the schedule over the slowest stage (1F1B or interleaved, or DualPipe:
    ``solver.cost.schedule``), the pipeline's p2p sends, then the slowest stage tail (gradient
    sync and optimizer step)."""
    m = num_micro_batches
    critical = max(costs, key=lambda cost: cost.time.total_s).time
    dualpipe = schedule is PipelineSchedule.DUALPIPE
    if dualpipe:
        busy_s, bubble_s = dualpipe_time_s(critical.total_s, critical.backward_s, critical.recompute_s, parallel.pp_size, m)
    else:
        busy_s, bubble_s = pipeline_time_s(critical.total_s, parallel.pp_size, parallel.virtual_stages, m)
    blocks = prof.transformer_layers
    pp_comm = pipeline_comm_s(
        cluster, parallel, m, blocks[0].output_bytes if blocks else 0, overlap=overlap_p2p_comm, busy_s=busy_s,
        dualpipe=dualpipe,
    )
    tail = max(tails, key=lambda t: t.dp_exposed_s + t.optimizer_s)
    step_s = busy_s + bubble_s + pp_comm + tail.dp_exposed_s + tail.optimizer_s
    breakdown = StepBreakdown(
        compute_s=m * critical.compute_s,
        recompute_s=m * critical.recompute_s,
        # The breakdown reports the context-parallel ring exchange and the MoE all-to-alls with
        # the other collectives inside a layer (tensor and sequence parallel); the stage keeps
        # them apart.
        tp_comm_s=m * (critical.tp_comm_s + critical.cp_comm_s + critical.ep_comm_s),
        pp_comm_s=pp_comm,
        dp_comm_exposed_s=tail.dp_exposed_s,
        grad_accumulation_s=m * critical.grad_accumulation_s,
        bubble_s=bubble_s,
        optimizer_s=tail.optimizer_s,
    )
    return step_s, breakdown


def throughput(
    model: ModelSpec,
    cluster: ClusterSpec,
    training: TrainingSpec,
    parallel: ParallelConfig,
    num_gpus: int,
    step_s: float,
    breakdown: StepBreakdown,
    recomputed_layers: int,
) -> Prediction:
    """Tokens and samples per second, model and hardware FLOP rates per GPU, MFU and HFU
    (``solver.cost.flops``), and the time to train when a token budget is given."""
    seq = training.seq_length
    model_flops = model_flops_per_iteration(model, training.global_batch_size, seq)
    hardware_flops = hardware_flops_per_iteration(
        model, training.global_batch_size, seq, parallel.recompute, recomputed_layers / model.num_layers
    )
    peak = cluster.gpu.peak(training.precision)
    if not math.isfinite(step_s) or step_s <= 0:
        # The specs' ranges keep every input finite and positive; this guards the JSON edge.
        raise SpecError("cluster", f"the predicted step time is {step_s!r} s: a hardware figure is outside what the model can cost")
    tokens_per_s = training.tokens_per_step / step_s
    return Prediction(
        step_time_s=step_s,
        tokens_per_s=tokens_per_s,
        samples_per_s=training.global_batch_size / step_s,
        model_tflops_per_gpu=model_flops / step_s / num_gpus / 1e12,
        hardware_tflops_per_gpu=hardware_flops / step_s / num_gpus / 1e12,
        mfu=model_flops / step_s / num_gpus / peak,
        hfu=hardware_flops / step_s / num_gpus / peak,
        time_to_train_s=training.train_tokens / tokens_per_s if training.train_tokens else None,
        breakdown_s=breakdown,
    )


def host_violations(cluster: ClusterSpec, host_bytes_per_node: float) -> list[Violation]:
    """What is offloaded must fit in each node's host memory (nothing to check without offload)."""
    if host_bytes_per_node <= 0 or cluster.host_memory_bytes is None or host_bytes_per_node <= cluster.host_memory_bytes:
        return []
    return [
        Violation(
            Rule.HOST_MEMORY,
            f"offloaded states need {host_bytes_per_node / GIB_BYTES:.1f} GiB of host memory per node,"
            f" the node has {cluster.host_memory_bytes / GIB_BYTES:.1f} GiB",
        )
    ]


def nvme_violations(cluster: ClusterSpec, nvme_bytes_per_node: float) -> list[Violation]:
    """What is offloaded to NVMe must fit on each node's drives (nothing to check without it)."""
    if nvme_bytes_per_node <= 0 or cluster.nvme_bytes is None or nvme_bytes_per_node <= cluster.nvme_bytes:
        return []
    return [
        Violation(
            Rule.NVME_CAPACITY,
            f"states offloaded to NVMe need {nvme_bytes_per_node / 1e12:.2f} TB per node,"
            f" the node's NVMe holds {cluster.nvme_bytes / 1e12:.2f} TB",
        )
    ]


def violations(
    reports: tuple[StageReport, ...], cluster: ClusterSpec, parallel: ParallelConfig, policy: Policy
) -> list[Violation]:
    """The framework's and placement rules the configuration breaks, and every stage that does
    not fit in the usable memory."""
    found = framework_violations(parallel, policy.framework) + placement_violations(
        cluster, parallel, policy.allow_tp_across_nodes
    )
    capacity = cluster.gpu.memory_bytes
    usable = capacity * policy.max_memory_fraction
    for report in reports:
        if report.peak_bytes > usable:
            limit = (
                f"the GPU has {capacity / GIB_BYTES:.1f} GiB"
                if policy.max_memory_fraction >= 1.0
                else f"{policy.max_memory_fraction:.0%} of the GPU's {capacity / GIB_BYTES:.1f} GiB is {usable / GIB_BYTES:.1f} GiB"
            )
            found.append(Violation(Rule.MEMORY, f"stage {report.stage} needs {report.peak_bytes / GIB_BYTES:.1f} GiB, {limit}"))
    return found
