"""Layer-to-stage partition and per-stage full recomputation, from the per-layer profile.

PipeDream's planner (Narayanan et al. 2019, Sec 3.1) splits a chain of profiled layers into
contiguous stages that minimise the slowest stage. Here each stage also has a memory bound: under
1F1B stage i of p keeps p - i micro-batches of activations (Narayanan et al. 2021, Sec 2.2), so
early stages may have to recompute some of their layers (Chen et al. 2016; the first N layers of
a stage keep only their input, Megatron-LM's "block" recompute granularity). We choose the layer
counts and the recomputed layers of every stage together, minimising the bottleneck stage time,
then (second, with that time fixed) the largest per-stage model state, which drives the
data-parallel tail and optimizer step.

Everything is in integers: times in nanoseconds (``stage_time_ns``), memory in KiB, each per-layer
amount rounded up and each budget rounded down, so a plan that fits here fits the evaluator
(which re-checks every plan anyway).

Exact solvers on the same ``PartitionProblem`` (``solve`` picks one):
- ``solve_fast``: identical transformer layers (every analytic profile). Stages are then
  interchangeable except for their in-flight count and extras, so a bottleneck T is feasible iff
  the per-stage maximal layer counts under T sum to at least L; binary search over the finite set
  of stage times, then a water-fill for the secondary objective. Provably optimal, O(p L) numpy.
- ``solver.partition.chain.solve_chain``: any chain of layers (measured profiles), a dynamic
  program over stage boundaries vectorised with numpy (tens of ms for 128 layers x 64 stages).
- ``solver.partition.tail.solve_tail``: the chain program's solution where the chain ends in a
  run of identical layers (an MoE model after its dense layers), tabling only the ranges that
  start in the distinct head.
- ``solver.partition.cpsat.solve_cpsat``: any chain, CP-SAT over stage boundaries with prefix sums
  (the linear model when layers are identical). The reference both fast paths are tested
  against, and the solver for chains too long for the chain program's tables.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import Any

import numpy as np

from solver.cost.memory import in_flight_micro_batches, reserve_bytes
from solver.cost.offload import checkpoint_buffer_bytes, offloads_activations
from solver.cost.profile import LayerChain
from solver.cost.stage import (
    StagePolicy,
    activation_bytes,
    expert_state_bytes_per_parameter,
    extras_activation_bytes,
    grad_accumulation_s,
    largest_tensor_count,
    stage_buffer_bytes,
    state_bytes_per_parameter,
    step_copy_bytes,
    step_peak_excess_bytes,
    working_bytes,
    zero_bucket_at_peak_bytes,
)
from solver.spec.hardware import GpuSpec
from solver.spec.parallel import ParallelConfig
from solver.spec.training import Recompute, TrainingSpec

KIB_BYTES = 1024
NS_PER_S = 1e9
INFEASIBLE_NS = np.iinfo(np.int64).max // 4  # marks a (stage, layer count) that cannot fit


@dataclass(frozen=True)
class PartitionProblem:
    """One pipeline's partition problem, in integers (ns, KiB). Layer arrays are indexed by
    transformer layer; stage arrays by pipeline stage (one GPU)."""

    num_stages: int
    virtual_stages: int
    layer_time_ns: tuple[int, ...]  # forward + backward + TP comm (+ selective recompute) of a layer
    layer_recompute_ns: tuple[int, ...]  # extra time when the layer is fully recomputed
    layer_kept_kib: tuple[int, ...]  # activations kept per in-flight micro-batch, not recomputed
    layer_checkpoint_kib: tuple[int, ...]  # the same when fully recomputed (its input only)
    layer_state_kib: tuple[int, ...]  # weights + gradients + optimizer states on one GPU
    # Per stage: what recomputing a layer adds to its memory, one layer's backward working set
    # (recompute and gradients, stage.working_bytes) beyond the base's, which the budgets hold
    # (less on the head's stage, whose loss peak and working set are alive one after the other).
    stage_working_kib: tuple[int, ...]
    in_flight: tuple[float, ...]  # micro-batches of activations each stage holds at its peak
    stage_extra_time_ns: tuple[int, ...]  # embedding on the first stage, head on the last
    stage_extra_state_kib: tuple[int, ...]  # the embedding's / head's model states
    stage_budget_kib: tuple[int, ...]  # memory for the stage's layers once fixed items are paid
    allow_recompute: bool

    @property
    def num_layers(self) -> int:
        return len(self.layer_time_ns)

    @cached_property
    def identical_layers(self) -> bool:
        rows = (self.layer_time_ns, self.layer_recompute_ns, self.layer_kept_kib, self.layer_checkpoint_kib, self.layer_state_kib)
        return all(not row or row.count(row[0]) == len(row) for row in rows)


class PartitionMethod(str, Enum):
    """Which solver produced a partition."""

    FAST = "fast"  # identical layers, bisection (fast.py)
    CHAIN = "chain"  # dynamic program over boundaries (chain.py)
    CPSAT = "cpsat"  # CP-SAT over boundaries (cpsat.py)
    FIXED = "fixed"  # given layer counts, least recompute (fixed.py)


class SolveStatus(str, Enum):
    OPTIMAL = "OPTIMAL"  # proven optimal
    FEASIBLE = "FEASIBLE"  # CP-SAT stopped by its time limit with a plan
    FIXED = "FIXED"  # the layer counts were given


@dataclass(frozen=True)
class PartitionSolution:
    """Layers and recomputed layers per chunk (pipeline order), and the two objective values."""

    stage_layers: tuple[int, ...]
    recompute_layers: tuple[int, ...]  # the first N layers of each chunk are fully recomputed
    stage_time_ns: int  # the slowest stage's time per micro-batch
    max_stage_state_kib: int  # the largest stage's model states (secondary objective)
    method: PartitionMethod
    status: SolveStatus


# --------------------------------------------------------------------------- the stage bound


def stage_memory_kib(in_flight: Any, kept_kib: Any, state_kib: Any, working_kib: Any) -> Any:
    """The left side of a stage's memory constraint, ``<= stage_budget_kib[stage]``: the
    activations bound of ``solver.cost.stage.activation_bytes`` plus the model states of the
    stage's layers (fixed items are already out of the budget). ``working_kib`` is the recompute
    working set when the stage recomputes any layer, else 0. Every solver writes its constraint
    through this function, with ints, numpy arrays or CP-SAT expressions."""
    return activation_bytes(in_flight, kept_kib, working_kib) + state_kib


def stage_time_ns(layers_ns: Any, recompute_ns: Any, extra_ns: Any) -> Any:
    """A stage's time per micro-batch: its layers (with gradient accumulation), the full
    recomputation of its recomputed layers, and its extras (embedding, head, one launch)."""
    return layers_ns + recompute_ns + extra_ns


def least_recompute(without_kib: Any, working_kib: Any, budget_kib: Any, saving_kib: Any) -> Any:
    """Identical memory rows: the least k >= 1 recomputed layers with
    ``without - k * saving + working <= budget``, where ``without`` is the stage's memory with
    none recomputed and ``saving`` what each recomputed layer frees (in-flight x (kept -
    checkpoint)). The caller checks k against the layers held. Scalars or numpy arrays."""
    return np.maximum(1, np.ceil((without_kib + working_kib - budget_kib) / np.maximum(saving_kib, 1e-30) - 1e-9))


def bottleneck_lower_bound_ns(problem: PartitionProblem) -> int:
    """No partition of ``problem`` (one chunk per stage, each stage at least one layer) has a
    slowest stage faster than this: at least the average stage (every layer and extra, no
    recomputation, over the stages), and at least any stage's extras with the fastest layer."""
    p = problem.num_stages
    average = -(-(sum(problem.layer_time_ns) + sum(problem.stage_extra_time_ns)) // p)  # ceil, in integers
    fastest = min(problem.layer_time_ns, default=0)
    return max(average, max(problem.stage_extra_time_ns, default=0) + fastest)


def rounding_slack_ns(num_layers: int) -> int:
    """How much a stage's integer time can exceed what the evaluator adds up in floats: every
    layer's time, gradient accumulation and recompute are each rounded up to a whole ns (3 per
    layer), the stage's extras once (1), and 1 more for float sums taken in another order."""
    return 3 * num_layers + 2


def stage_time_lower_bound_s(stage_time_ns: int, num_layers: int) -> float:
    """A lower bound, in seconds, on the evaluator's time of a stage the partition costs at
    ``stage_time_ns``."""
    return max(0, stage_time_ns - rounding_slack_ns(num_layers)) / NS_PER_S


# --------------------------------------------------------------------------- building problems


def _kib(value_bytes: float) -> int:
    return int(math.ceil(value_bytes / KIB_BYTES))


def _ns(value_s: float) -> int:
    return int(math.ceil(value_s * NS_PER_S))


def layer_rows(profile: LayerChain, base: Recompute) -> tuple[tuple[int, ...], ...]:
    """Per transformer layer: time ns, recompute ns, kept KiB, checkpoint KiB, parameters,
    full-recompute working-set KiB, the working set under ``base`` alone (both with the layer's
    backward gradients: ``solver.cost.stage.working_bytes``), and routed-expert
    parameters; layers not fully recomputed run ``base`` (NONE or SELECTIVE).
    One profile's rows serve every ZeRO stage, dp and pp: callers that plan many shapes compute
    them once (``partition_problem``'s ``rows``)."""
    full = Recompute.FULL
    # One row per distinct layer object: an analytic chain repeats its one or two kinds of layer.
    known: dict[int, tuple[int, ...]] = {}
    rows = []
    for layer in profile.transformer_layers:
        row = known.get(id(layer))
        if row is None:
            row = known[id(layer)] = (
                _ns(layer.time_s(base)),
                _ns(layer.recompute_s(full) - layer.recompute_s(base)),
                _kib(layer.kept_bytes(base)),
                _kib(layer.kept_bytes(full)),
                layer.parameter_count,
                _kib(working_bytes(layer)),
                _kib(working_bytes(layer, base)),
                layer.expert_parameter_count,
            )
        rows.append(row)
    return tuple(zip(*rows)) if rows else ((),) * 8


def allocatable_bytes(usable_bytes: float, fragmentation_fraction: float) -> float:
    """What may be allocated when the reserve (runtime + fragmentation x allocated) must fit too:
    allocated <= (usable - runtime) / (1 + fraction)."""
    runtime = reserve_bytes(0.0, fragmentation_fraction)
    return (usable_bytes - runtime) / (1.0 + fragmentation_fraction)


def partition_problem(
    profile: LayerChain,
    parallel: ParallelConfig,
    training: TrainingSpec,
    num_micro_batches: int,
    usable_bytes: float,
    allow_recompute: bool,
    gpu_spec: GpuSpec,
    rows: tuple[tuple[int, ...], ...] | None = None,
) -> PartitionProblem:
    """The partition problem of ``parallel`` (its dp/tp/pp/ZeRO/micro-batch/v; its partition and
    recompute are what is being chosen), from the stage terms of ``solver.cost.stage``: model
    states under ZeRO, in-flight activations, the backward working set, embedding and logits,
    ZeRO-3 gather buffers, and the reserve (affine in what is allocated)."""
    pp, v = parallel.pp_size, parallel.virtual_stages
    gpu = gpu_spec
    policy = StagePolicy.of(gpu, parallel, training, num_micro_batches)
    embedding, head = profile.embedding, profile.head
    state_per_param = state_bytes_per_parameter(parallel, training)
    # Routed experts' states shard over fewer ranks than the rest (stage.stage_state_bytes).
    expert_state_per_param = expert_state_bytes_per_parameter(parallel, training)
    in_flight = tuple(in_flight_micro_batches(stage, pp, v, num_micro_batches) for stage in range(pp))
    allocatable = allocatable_bytes(usable_bytes, training.allocator_fragmentation_fraction)

    times, recomputes, kept, checkpoints, params, working, base_working, experts = rows or layer_rows(profile, policy.base_recompute)
    # Every stage holds one layer's backward gradients, and a selective base rebuilds what it
    # dropped for that layer (solver.cost.stage.working_bytes); a fully recomputed layer's
    # working set contains both. So the base's share is taken out of every stage's budget, and a stage that
    # recomputes a layer adds only the difference.
    base_working_kib = max(base_working, default=0)
    extras_all = [layer for layer in (embedding, head) if layer is not None]
    largest = max([max(params, default=0), *(layer.parameter_count for layer in extras_all)])  # counts are >= 0
    # Exact for one stage; with several, before their layers are known, the two-layer bound.
    everything = sum(params) + sum(layer.parameter_count for layer in extras_all) if pp == 1 else math.inf
    gather_buffers = stage_buffer_bytes(largest, everything, policy)
    if offloads_activations(parallel.offload):
        # Recomputed layers' checkpoints go to the host; two layers' stay in transit (the
        # largest: before the recomputed layers are known).
        gather_buffers += checkpoint_buffer_bytes(max(checkpoints, default=0) * KIB_BYTES, parallel.offload)
        checkpoints = (0,) * len(checkpoints)
    if parallel.activation_offload_layers:
        # The first N layers' activations go to the host (one stage, no recomputation).
        kept = (0,) * parallel.activation_offload_layers + tuple(kept[parallel.activation_offload_layers:])

    # Gradient accumulation is one kernel per stage: its launch is a stage extra, and each
    # layer carries its share of the bytes.
    launch_s = grad_accumulation_s(gpu, 0, policy)

    def accumulation_s(parameter_count: float) -> float:
        return grad_accumulation_s(gpu, parameter_count, policy) - launch_s

    full_working_kib = max(base_working_kib, max(working, default=0))
    # The optimizer step's gradient copy (stage.step_peak_excess_bytes) outlives the backward's
    # transient memory; before the stage's layers are known, its copy over every parameter of the
    # model (exact with one stage), less the part of that transient memory every stage holds
    # anyway: its fixed buffers, the base's working set and, with one stage (every layer on it),
    # each layer's checkpoint or what it keeps unrecomputed, whichever is less. Never below the
    # evaluator's.
    all_experts = sum(experts) + sum(layer.expert_parameter_count for layer in extras_all)
    all_params = sum(params) + sum(layer.parameter_count for layer in extras_all)
    # The step's per-tensor copies (stage.step_phases) of the model's largest tensor, where the
    # stack makes them (a walk over every layer: only then).
    largest_tensor = largest_tensor_count([*profile.transformer_layers, *extras_all]) if training.zero_step_norm_copies else None
    copy_bound = max(
        step_copy_bytes(all_params, policy, all_experts, largest_tensor), step_copy_bytes(all_params, policy, 0, largest_tensor)
    )
    least_kept_kib = sum(map(min, kept, checkpoints)) if pp == 1 and copy_bound else 0

    def stage_terms(stage: int) -> tuple[int, int, int, int]:
        """The stage's extra time, extra state, budget and recompute working set."""
        first_stage, last_stage = stage == 0, stage == pp - 1
        extras = [layer for layer, here in ((embedding, first_stage), (head, last_stage)) if layer is not None and here]
        # The head's peak and the base's working set are alive one after the other
        # (stage.extras_activation_bytes): the head adds what it holds beyond the base's, and a
        # stage that recomputes adds its working set's excess (stage_working below).
        fixed = gather_buffers + zero_bucket_at_peak_bytes(policy) + extras_activation_bytes(
            in_flight[stage], embedding if first_stage else None, head if last_stage else None, policy.base_recompute,
            base_working_kib * KIB_BYTES,
        )
        # The step's excess carries no fragmentation (stage_cost's reserve): it leaves the budget
        # allocatable_bytes scaled for it as itself.
        fixed += step_peak_excess_bytes(
            copy_bound, fixed + (base_working_kib + in_flight[stage] * least_kept_kib) * KIB_BYTES
        ) / (1.0 + training.allocator_fragmentation_fraction)
        extra_params = sum(layer.parameter_count for layer in extras)
        extra_experts = sum(layer.expert_parameter_count for layer in extras)  # a head's MTP layer has experts
        time_ns = _ns(sum(layer.time_s(policy.base_recompute) for layer in extras) + launch_s + accumulation_s(extra_params))
        state = _kib(state_per_param * (extra_params - extra_experts) + expert_state_per_param * extra_experts)
        budget = int(math.floor((allocatable - fixed) / KIB_BYTES)) - state - base_working_kib
        if last_stage and head is not None:
            # The head's stage holds max(head, working set): recomputing raises it from
            # max(head, base's) to max(head, full), not by the full excess.
            head_kib = _kib(head.kept_bytes(policy.base_recompute))
            return time_ns, state, budget, max(head_kib, full_working_kib) - max(head_kib, base_working_kib)
        return time_ns, state, budget, full_working_kib - base_working_kib

    # A middle stage holds neither the embedding nor the head: its extras are one launch and its
    # fixed memory the gather buffers, whatever its in-flight count. Worked out once.
    terms = [stage_terms(0)]
    if pp > 2:
        terms += [stage_terms(1)] * (pp - 2)
    if pp > 1:
        terms.append(stage_terms(pp - 1))
    extra_time, extra_state, budget, stage_working = (list(column) for column in zip(*terms))

    first = params[0] if params else 0
    if any(experts):
        # An MoE model's layers are of a few kinds (dense, MoE): each kind's terms worked out once.
        kinds = {(p, e): _kib(state_per_param * (p - e) + expert_state_per_param * e) for p, e in set(zip(params, experts))}
        state_kib = tuple(map(kinds.__getitem__, zip(params, experts)))  # per layer, as kinds[p, e]
        accumulation = {p: _ns(accumulation_s(p)) for p in set(params)}
        times = tuple(map(operator.add, times, map(accumulation.__getitem__, params)))  # t + accumulation[p]
    elif params.count(first) == len(params):
        state_kib = (_kib(state_per_param * first),) * len(params)
        accumulation_ns = _ns(accumulation_s(first))
        if times.count(times[0]) == len(times):
            times = (times[0] + accumulation_ns,) * len(times)
        else:
            times = tuple(t + accumulation_ns for t in times)
    else:
        state_kib = tuple(_kib(state_per_param * p) for p in params)
        times = tuple(t + _ns(accumulation_s(p)) for t, p in zip(times, params))
    return PartitionProblem(
        num_stages=pp,
        virtual_stages=v,
        layer_time_ns=times,
        layer_recompute_ns=recomputes,
        layer_kept_kib=kept,
        layer_checkpoint_kib=checkpoints,
        layer_state_kib=state_kib,
        stage_working_kib=tuple(stage_working),
        in_flight=in_flight,
        stage_extra_time_ns=tuple(extra_time),
        stage_extra_state_kib=tuple(extra_state),
        stage_budget_kib=tuple(budget),
        allow_recompute=allow_recompute,
    )
