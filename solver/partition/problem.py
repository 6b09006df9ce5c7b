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

Three exact solvers on the same ``PartitionProblem`` (``solve`` picks one):
- ``solve_fast``: identical transformer layers (every analytic profile). Stages are then
  interchangeable except for their in-flight count and extras, so a bottleneck T is feasible iff
  the per-stage maximal layer counts under T sum to at least L; binary search over the finite set
  of stage times, then a water-fill for the secondary objective. Provably optimal, O(p L) numpy.
- ``solver.partition.chain.solve_chain``: any chain of layers (measured profiles), a dynamic
  program over stage boundaries vectorised with numpy (tens of ms for 128 layers x 64 stages).
- ``solver.partition.cpsat.solve_cpsat``: any chain, CP-SAT over stage boundaries with prefix sums
  (the linear model when layers are identical). The reference both fast paths are tested
  against, and the solver for chains too long for the chain program's tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from solver.cost.compute import elementwise_time_s
from solver.cost.memory import (
    GRAD_ACCUMULATION_BYTES_PER_PARAM,
    WEIGHT_BYTES_PER_PARAM,
    ZERO3_PREFETCHED_LAYERS,
    in_flight_micro_batches,
    model_state_bytes,
    reserve_bytes,
)
from solver.cost.profile import LayerProfile, ModelProfile
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
    working_kib: int  # a recomputed layer's activations beyond its checkpoint, rebuilt once in backward
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


@dataclass(frozen=True)
class PartitionSolution:
    """Layers and recomputed layers per chunk (pipeline order), and the two objective values."""

    stage_layers: tuple[int, ...]
    recompute_layers: tuple[int, ...]  # the first N layers of each chunk are fully recomputed
    stage_time_ns: int  # the slowest stage's time per micro-batch
    max_stage_state_kib: int  # the largest stage's model states (secondary objective)
    method: str  # "fast", "cpsat" or "fixed" (given layer counts)
    status: str  # "OPTIMAL", "FEASIBLE" (CP-SAT stopped by its time limit) or "FIXED"


# --------------------------------------------------------------------------- building problems


def _kib(value_bytes: float) -> int:
    return int(math.ceil(value_bytes / KIB_BYTES))


def _ns(value_s: float) -> int:
    return int(math.ceil(value_s * NS_PER_S))


def layer_rows(profile: ModelProfile, selective: bool) -> tuple[tuple[int, ...], ...]:
    """Per transformer layer: time ns, recompute ns, kept KiB, checkpoint KiB, parameters,
    recompute working-set KiB. One profile's rows serve every ZeRO stage, dp and pp: callers
    that plan many shapes compute them once (``partition_problem``'s ``rows``)."""
    blocks = profile.transformer_layers
    return (
        tuple(_ns(layer.time_s(False, selective)) for layer in blocks),
        tuple(_ns(layer.recompute_s(True, selective) - layer.recompute_s(False, selective)) for layer in blocks),
        tuple(_kib(layer.kept_bytes(False, selective)) for layer in blocks),
        tuple(_kib(layer.kept_bytes(True, selective)) for layer in blocks),
        tuple(layer.parameter_count for layer in blocks),
        tuple(_kib(layer.activation_bytes - layer.checkpoint_bytes) for layer in blocks),
    )


def state_bytes_per_parameter(parallel: ParallelConfig, training: TrainingSpec) -> float:
    """Bytes of model state per parameter on one GPU (weights + gradients + optimizer states)."""
    return sum(model_state_bytes(1.0, parallel.zero_stage, parallel.dp_size, training.optimizer).values())


def allocatable_bytes(usable_bytes: float) -> float:
    """What may be allocated when the reserve (runtime + fragmentation x allocated) must fit too:
    allocated <= (usable - runtime) / (1 + fraction)."""
    runtime = reserve_bytes(0.0)
    fraction = (reserve_bytes(2.0**40) - runtime) / 2.0**40
    return (usable_bytes - runtime) / (1.0 + fraction)


def partition_problem(
    profile: ModelProfile,
    parallel: ParallelConfig,
    training: TrainingSpec,
    num_micro_batches: int,
    usable_bytes: float,
    allow_recompute: bool,
    gpu_spec: GpuSpec,
    rows: tuple[tuple[int, ...], ...] | None = None,
) -> PartitionProblem:
    """The partition problem of ``parallel`` (its dp/tp/pp/ZeRO/micro-batch/v; its partition and
    recompute are what is being chosen). Memory follows ``solver.cost.evaluate`` term by term:
    model states under ZeRO, in-flight activations, the recompute working set, embedding and
    logits, ZeRO-3 gather buffers, and the reserve (affine in what is allocated)."""
    pp, v, dp = parallel.pp_size, parallel.virtual_stages, parallel.dp_size
    gpu = gpu_spec
    selective = parallel.recompute is Recompute.SELECTIVE
    embedding, head = profile.embedding, profile.head
    state_per_param = state_bytes_per_parameter(parallel, training)
    in_flight = tuple(in_flight_micro_batches(stage, pp, v, num_micro_batches) for stage in range(pp))
    allocatable = allocatable_bytes(usable_bytes)

    times, recomputes, kept, checkpoints, params, working = rows or layer_rows(profile, selective)
    extras_all = [layer for layer in (embedding, head) if layer is not None]
    largest = max([*params, *(layer.parameter_count for layer in extras_all)], default=0)
    gather_buffers = 0.0
    if int(parallel.zero_stage) == 3 and dp > 1:
        # The gathered weights of two layers, capped by the unsharded weights they stand for
        # (exact for one stage, an upper bound for several).
        gather_buffers = ZERO3_PREFETCHED_LAYERS * largest * WEIGHT_BYTES_PER_PARAM
        if pp == 1:
            everything = sum(params) + sum(layer.parameter_count for layer in extras_all)
            gather_buffers = min(ZERO3_PREFETCHED_LAYERS * largest, everything * (1 - 1 / dp)) * WEIGHT_BYTES_PER_PARAM

    # Every micro-batch's backward adds into the gradient buffer (one kernel per stage).
    def accumulation_s(parameter_count: float) -> float:
        if num_micro_batches <= 1:
            return 0.0
        accumulated = parameter_count / dp if int(parallel.zero_stage) >= 2 else parameter_count
        return elementwise_time_s(gpu, GRAD_ACCUMULATION_BYTES_PER_PARAM * accumulated) - elementwise_time_s(gpu, 0.0)

    launch_s = elementwise_time_s(gpu, 0.0) if num_micro_batches > 1 else 0.0

    extra_time, extra_state, budget = [], [], []
    for stage in range(pp):
        extras: list[LayerProfile] = []
        fixed = gather_buffers
        if stage == 0 and embedding is not None:
            extras.append(embedding)
            fixed += in_flight[stage] * embedding.activation_bytes
        if stage == pp - 1 and head is not None:
            extras.append(head)
            fixed += head.activation_bytes  # the last stage holds one micro-batch of logits
        extra_params = sum(layer.parameter_count for layer in extras)
        extra_time.append(_ns(sum(layer.time_s(False, False) for layer in extras) + launch_s + accumulation_s(extra_params)))
        state = _kib(state_per_param * sum(layer.parameter_count for layer in extras))
        extra_state.append(state)
        budget.append(int(math.floor((allocatable - fixed) / KIB_BYTES)) - state)

    first = params[0] if params else 0
    if params.count(first) == len(params):
        state_kib = (_kib(state_per_param * first),) * len(params)
        accumulation_ns = _ns(accumulation_s(first))
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
        working_kib=max(working, default=0),
        in_flight=in_flight,
        stage_extra_time_ns=tuple(extra_time),
        stage_extra_state_kib=tuple(extra_state),
        stage_budget_kib=tuple(budget),
        allow_recompute=allow_recompute,
    )


# --------------------------------------------------------------------------- fixed layer counts


# --------------------------------------------------------------------------- fast exact path


# --------------------------------------------------------------------------- dispatch


