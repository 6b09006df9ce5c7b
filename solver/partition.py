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
- ``solver.search_chain.solve_chain``: any chain of layers (measured profiles), a dynamic
  program over stage boundaries vectorised with numpy (tens of ms for 128 layers x 64 stages).
- ``solver.search_cpsat.solve_cpsat``: any chain, CP-SAT over stage boundaries with prefix sums
  (the linear model when layers are identical). The reference both fast paths are tested
  against, and the solver for chains too long for the chain program's tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate

import numpy as np

from solver.evaluate import ZERO3_PREFETCHED_LAYERS
from solver.execution import ParallelConfig, Recompute, TrainingSpec
from solver.compute import elementwise_time_s
from solver.memory import (
    GRAD_ACCUMULATION_BYTES_PER_PARAM,
    WEIGHT_BYTES_PER_PARAM,
    in_flight_micro_batches,
    model_state_bytes,
    reserve_bytes,
)
from solver.hardware import GpuSpec
from solver.profile import LayerProfile, ModelProfile

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
    recompute are what is being chosen). Memory follows ``solver.evaluate`` term by term:
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


def _chunk_starts(counts: tuple[int, ...]) -> list[int]:
    return [0, *accumulate(counts)][:-1]


def _spread(total: int, parts: int) -> list[int]:
    """``total`` recomputed layers over a stage's chunks, earlier chunks first."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def stage_cost(
    problem: PartitionProblem, stage: int, chunks: list[tuple[int, int]], recomputed: list[int]
) -> tuple[int, float, int]:
    """(time ns, memory KiB, model state KiB) of one stage holding ``chunks`` (first layer,
    count) with the first ``recomputed[j]`` layers of chunk j fully recomputed."""
    time_ns = problem.stage_extra_time_ns[stage]
    kept = 0
    state = problem.stage_extra_state_kib[stage]
    for (first, count), k in zip(chunks, recomputed):
        for layer in range(first, first + count):
            full = layer < first + k
            time_ns += problem.layer_time_ns[layer] + (problem.layer_recompute_ns[layer] if full else 0)
            kept += problem.layer_checkpoint_kib[layer] if full else problem.layer_kept_kib[layer]
            state += problem.layer_state_kib[layer]
    working = problem.working_kib if any(recomputed) else 0
    return time_ns, problem.in_flight[stage] * kept + working + state - problem.stage_extra_state_kib[stage], state


def fixed_partition(problem: PartitionProblem, chunk_layers: tuple[int, ...]) -> PartitionSolution | None:
    """The least recomputation that fits each stage for given layer counts per chunk (pipeline
    order), or None when a stage cannot fit even recomputing all of its layers. Each stage takes
    the smallest number of recomputed layers that fits, spread over its chunks earlier first
    (exact for identical layers: memory and time depend only on that number)."""
    p = problem.num_stages
    starts = _chunk_starts(chunk_layers)
    recompute = [0] * len(chunk_layers)
    worst_time, worst_state = 0, 0
    identical = problem.identical_layers
    for stage in range(p):
        mine = list(range(stage, len(chunk_layers), p))
        chunks = [(starts[c], chunk_layers[c]) for c in mine]
        held = sum(chunk_layers[c] for c in mine)
        least = _least_recompute(problem, stage, held) if identical else 0
        if least is None:
            return None
        for total in range(least, held + 1 if problem.allow_recompute else 1):
            counts = _spread(total, len(mine))
            counts = [min(k, chunk_layers[c]) for k, c in zip(counts, mine)]
            time_ns, memory, state = stage_cost(problem, stage, chunks, counts)
            if memory <= problem.stage_budget_kib[stage]:
                break
        else:
            return None
        for c, k in zip(mine, counts):
            recompute[c] = k
        worst_time, worst_state = max(worst_time, time_ns), max(worst_state, state)
    return PartitionSolution(tuple(chunk_layers), tuple(recompute), worst_time, worst_state, "fixed", "FIXED")


def _least_recompute(problem: PartitionProblem, stage: int, held: int) -> int | None:
    """Identical layers: the least number of the stage's ``held`` layers to recompute so that it
    fits (closed form of the memory bound), None when recomputing all of them does not fit."""
    kept, ckpt, state = problem.layer_kept_kib[0], problem.layer_checkpoint_kib[0], problem.layer_state_kib[0]
    f, budget = problem.in_flight[stage], problem.stage_budget_kib[stage]
    without = f * held * kept + held * state
    if without <= budget:
        return 0
    if not problem.allow_recompute or kept <= ckpt:
        return None
    least = max(1, math.ceil((without + problem.working_kib - budget) / (f * (kept - ckpt)) - 1e-9))
    return least if least <= held else None


# --------------------------------------------------------------------------- fast exact path


def _stage_tables(problem: PartitionProblem) -> tuple[np.ndarray, np.ndarray, int]:
    """For identical layers: per stage and layer count n (1..n_max), the least number of
    recomputed layers that fits (``recomputed[i, n-1]``) and the stage time
    (``time_ns[i, n-1]``, INFEASIBLE_NS where nothing fits)."""
    p, layers = problem.num_stages, problem.num_layers
    n_max = layers - (p - 1)
    t, r = problem.layer_time_ns[0], problem.layer_recompute_ns[0]
    kept, ckpt, state = problem.layer_kept_kib[0], problem.layer_checkpoint_kib[0], problem.layer_state_kib[0]
    n = np.arange(1, n_max + 1, dtype=np.int64)[None, :]
    in_flight = np.array(problem.in_flight, dtype=np.float64)[:, None]
    budget = np.array(problem.stage_budget_kib, dtype=np.float64)[:, None]
    without = in_flight * n * kept + n * state
    fits_plain = without <= budget
    saving = in_flight * (kept - ckpt)  # memory saved by each recomputed layer
    if problem.allow_recompute and kept > ckpt:
        needed = np.ceil((without + problem.working_kib - budget) / np.maximum(saving, 1e-30) - 1e-9)
        needed = np.maximum(needed, 1)
    else:
        needed = np.full(without.shape, np.inf)
    recomputed = np.where(fits_plain, 0, needed)
    ok = recomputed <= n
    recomputed = np.where(ok, recomputed, 0).astype(np.int64)
    extra = np.array(problem.stage_extra_time_ns, dtype=np.int64)[:, None]
    time_ns = np.where(ok, n * t + recomputed * r + extra, INFEASIBLE_NS)
    return recomputed, time_ns, n_max


def solve_fast(problem: PartitionProblem) -> PartitionSolution | None:
    """Exact for identical layers and one chunk per stage (v = 1); None when nothing fits.

    With identical layers a stage's time and memory depend only on its layer count n and
    recomputed count k, and the least k that fits is best (recomputing only adds time). Stage i's
    time is nondecreasing in n, so under a bottleneck T it can take any n up to cap_i(T); T is
    feasible iff every cap_i(T) >= 1 and they sum to at least L. The optimal T is the least such
    value among the finitely many stage times. Second, with T fixed, the largest stage state
    n_i * s + S_i is minimised the same way (water-fill)."""
    if problem.virtual_stages != 1 or not problem.identical_layers:
        raise ValueError("solve_fast needs identical layers and virtual_stages == 1")
    p, layers = problem.num_stages, problem.num_layers
    recomputed, time_ns, n_max = _stage_tables(problem)

    def caps(bound: int) -> np.ndarray:
        # time_ns rows are nondecreasing in n: the count of entries <= bound is the cap.
        return (time_ns <= bound).sum(axis=1)

    candidates = np.unique(time_ns[time_ns < INFEASIBLE_NS])
    lo, hi = 0, len(candidates) - 1
    if hi < 0 or not _feasible(caps(int(candidates[hi])), layers):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if _feasible(caps(int(candidates[mid])), layers):
            hi = mid
        else:
            lo = mid + 1
    bottleneck = int(candidates[lo])
    cap = caps(bottleneck)

    state, extra_state = problem.layer_state_kib[0], np.array(problem.stage_extra_state_kib, dtype=np.int64)

    def limited(level: int) -> np.ndarray:
        by_state = (level - extra_state) // state if state > 0 else np.full(p, n_max)
        return np.minimum(cap, by_state)

    levels = np.unique((np.arange(1, n_max + 1)[None, :] * state + extra_state[:, None]).ravel())
    lo, hi = 0, len(levels) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if _feasible(limited(int(levels[mid])), layers):
            hi = mid
        else:
            lo = mid + 1
    counts = [int(c) for c in limited(int(levels[lo]))]
    excess = sum(counts) - layers
    while excess > 0:  # give back layers from the heaviest stage, the last such stage first
        heaviest = max((i for i in range(p) if counts[i] > 1), key=lambda i: (counts[i] * state + extra_state[i], i))
        counts[heaviest] -= 1
        excess -= 1
    recompute = tuple(int(recomputed[i, counts[i] - 1]) for i in range(p))
    worst_time = max(int(time_ns[i, counts[i] - 1]) for i in range(p))
    worst_state = max(counts[i] * state + int(extra_state[i]) for i in range(p))
    return PartitionSolution(tuple(counts), recompute, worst_time, worst_state, "fast", "OPTIMAL")


def _feasible(caps: np.ndarray, layers: int) -> bool:
    return bool(caps.min() >= 1 and caps.sum() >= layers)


# --------------------------------------------------------------------------- dispatch


# Above this many (stage, start, end) entries the exact chain tables (8 bytes each) grow past
# ~160 MiB; CP-SAT's boundary model takes over.
CHAIN_TABLE_LIMIT = 20_000_000


def solve(problem: PartitionProblem, time_limit_s: float = 10.0, upper_bound_ns: int | None = None) -> PartitionSolution | None:
    """The optimal partition of a one-chunk-per-stage pipeline: the closed-form fast path for
    identical layers, the exact chain program otherwise, CP-SAT for chains too long for its
    tables (``time_limit_s`` is CP-SAT's safety net; ``upper_bound_ns``, the bottleneck of a
    known feasible partition, narrows the chain program's search)."""
    if problem.virtual_stages != 1:
        raise ValueError("solve covers one chunk per stage; interleaved pipelines use fixed_partition")
    if problem.identical_layers:
        return solve_fast(problem)
    if problem.num_stages * problem.num_layers**2 <= CHAIN_TABLE_LIMIT:
        from solver.search_chain import solve_chain

        return solve_chain(problem, upper_bound_ns)
    from solver.search_cpsat import solve_cpsat

    return solve_cpsat(problem, time_limit_s=time_limit_s)
