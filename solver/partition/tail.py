"""The exact chain partition when the chain ends in a long run of identical layers.

MoE models put a few dense layers first (DeepSeek-V3: 3 dense, then 58 identical MoE layers), so
the closed-form fast path (``solver.partition.fast``) does not apply and the chain program
(``solver.partition.chain``) builds tables over every range [a, b), O(p L^2). Here only the
ranges that start in the distinct head (a <= D, where layers D.. are identical) are tabled, with
the chain program's own range function: a range [a, a + n) with a >= D has the values of
[D, D + n) (the same layers' integer sums), so every other entry is read from row D.

The chain program's reachability needs, per stage and start a, only the furthest end its
allowed ranges reach (allowed ranges from a start are a prefix in b): for a <= D it is counted
in the table, for a > D it is min(L, a + cap) with cap the count of row D. So a bisection step is
O(p L) rather than O(p L^2), the tables O(p D L log L).

This is the chain program's computation, not a new model: the candidate bottlenecks and states
are the same sets, the bisections take the same steps and the read-back picks the same starts, so
``solve_tail`` returns exactly ``solve_chain``'s solution (tests/test_partition.py checks it on
random chains with identical tails, and both against brute force).
"""

from __future__ import annotations

import numpy as np

from solver.partition.chain import UNREACHABLE, fits_table, range_tables, sorted_unique
from solver.partition.problem import INFEASIBLE_NS, PartitionMethod, PartitionProblem, PartitionSolution, SolveStatus, stage_memory_kib


def identical_tail_start(problem: PartitionProblem) -> int:
    """D: the first layer from which every layer is identical to the last (L - 1 when the last
    two differ)."""
    rows = (problem.layer_time_ns, problem.layer_recompute_ns, problem.layer_kept_kib, problem.layer_checkpoint_kib, problem.layer_state_kib)
    layers = problem.num_layers
    if layers == 0:
        return -1
    start = 0  # the least start that every row read so far allows
    for row in rows:  # each row from its end, down to the start the earlier rows need
        last = row[-1]
        equal = row.count(last)
        if row[layers - equal:] == (last,) * equal:  # the layers equal to the last are the row's end
            start = max(start, layers - equal)
            continue
        layer = layers - 2
        while layer >= start and row[layer] == last:
            layer -= 1
        start = layer + 1
    return start


# Bounds tried at once in a bisection step: a 16-ary search takes a quarter of a binary
# search's steps, each a numpy pass over 16 bounds instead of one.
BOUNDS_PER_STEP = 16


def _reachable(max_end: np.ndarray) -> list[np.ndarray]:
    """``chain._reachable`` from each stage's furthest end per start (max_end[..., i, a]):
    reach[i][..., b], boundary b is reachable after i stages. Leading axes are independent
    problems (bounds tried together)."""
    p, layers = max_end.shape[-2:]
    reach = [np.zeros(max_end.shape[:-2] + (layers + 1,), dtype=bool)]
    reach[0][..., 0] = True
    boundaries = np.arange(1, layers + 1)
    for stage in range(p):
        from_reachable = np.where(reach[-1][..., :layers], max_end[..., stage, :], -1)
        furthest = np.maximum.accumulate(from_reachable, axis=-1)
        nxt = np.zeros_like(reach[0])
        nxt[..., 1:] = furthest >= boundaries
        reach.append(nxt)
    return reach


def _reaches_end(counts: np.ndarray, layers: int) -> np.ndarray:
    """``_reachable(_max_end(counts, layers))[-1][..., L]`` (whether the last boundary is reachable
    after every stage), from ``counts[..., i, a]``, how many ranges stage i may take from head
    start a (``_max_end``), without keeping each stage's row: the bisections ask only this.

    Stage by stage through the head: after D stages every reachable boundary is at least D, where
    a stage i may take 1 to cap_i layers (row D's count) wherever it starts. From there the k
    stages left reach L from a reachable boundary a exactly when every cap_i is at least 1 and
    L - a lies between k and the sum of their caps (each step of 1 to cap_i layers, the steps'
    sums are every integer in between; a step past L is never one of them)."""
    p = counts.shape[-2]
    head = counts.shape[-1] - 1
    reach = np.zeros(counts.shape[:-2] + (layers,), dtype=bool)
    reach[..., 0] = True
    if head >= p:  # fewer stages than head layers: every stage by the table
        return _reach_through(reach, _max_end(counts, layers), p - 1, final=True)
    if head:
        reach = _reach_through(reach, _max_end(counts[..., :head, :], layers), head, final=False)
    caps = counts[..., head:, head]
    left = p - head
    distance = layers - np.arange(layers)  # L - a
    within = (distance >= left) & (distance <= caps.sum(axis=-1)[..., None])
    return (caps.min(axis=-1) >= 1) & np.any(reach & within, axis=-1)


def _reach_through(reach: np.ndarray, max_end: np.ndarray, stages: int, final: bool) -> np.ndarray:
    """``reach`` (boundaries before L reachable so far) after the first ``stages`` stages of
    ``max_end``, each row updated in place; ``final``: then whether the next stage reaches L."""
    layers = reach.shape[-1]
    boundaries = np.arange(1, layers + 1)
    furthest = np.empty(reach.shape, dtype=max_end.dtype)
    for stage in range(stages):
        np.copyto(furthest, -1)
        np.copyto(furthest, max_end[..., stage, :], where=reach)
        np.maximum.accumulate(furthest, axis=-1, out=furthest)
        reach[..., 1:] = furthest[..., :-1] >= boundaries[:-1]
        reach[..., 0] = False
    if not final:
        return reach
    last = np.where(reach, max_end[..., stages, :], -1)
    return last.max(axis=-1) >= layers


def _max_end(counts: np.ndarray, layers: int) -> np.ndarray:
    """max_end[..., i, a]: the furthest end b of an allowed range [a, b) of stage i, for every
    start a, from ``counts[..., i, a]``, the number of allowed ranges of stage i from the head's
    starts 0..D (allowed ranges from a start are a prefix in b, so the count gives the end); a
    start a > D reaches min(L, a + cap), cap being row D's count."""
    head_rows = counts.shape[-1]
    head_end = np.arange(head_rows) + counts
    tail_end = np.minimum(layers, np.arange(head_rows, layers) + counts[..., -1:])
    return np.concatenate((head_end, tail_end), axis=-1)


def _least(values: np.ndarray, feasible) -> int:
    """``chain.least_feasible`` (the least of the sorted ``values`` for which ``feasible`` holds,
    the last one known to hold), asking ``feasible`` about up to BOUNDS_PER_STEP values at once
    (it answers a bool per value). Feasibility grows with the value, so this is the same value."""
    lo, hi = 0, len(values) - 1
    while lo < hi:
        probes = sorted_unique(np.linspace(lo, hi - 1, min(BOUNDS_PER_STEP, hi - lo)).astype(np.int64))
        ok = feasible(values[probes])
        if ok.any():
            first = int(np.argmax(ok))
            hi = int(probes[first])
            lo = int(probes[first - 1]) + 1 if first > 0 else lo
        else:
            lo = int(probes[-1]) + 1
    return int(values[lo])


class _Tail:
    """The head rows (starts 0..D) of the chain program's tables."""

    def __init__(self, problem: PartitionProblem, head: int) -> None:
        self.head = head
        self.time_ns, self.recomputed, state = range_tables(problem, np.arange(head + 1))
        extra_state = np.asarray(problem.stage_extra_state_kib, dtype=np.float64)[:, None, None]
        self.stage_state = state[None, :, :] + extra_state

    def entry(self, table: np.ndarray, stage: int, start: int, end: int) -> float:
        """table[stage, start, end - 1] of the full chain table."""
        if start > self.head:
            start, end = self.head, self.head + end - start
        return table[stage, start, end - 1]


def solve_tail(problem: PartitionProblem, upper_bound_ns: int | None = None) -> PartitionSolution | None:
    """``solve_chain``'s solution (least bottleneck, then least largest stage state), or None,
    tabling only the ranges that start in the chain's distinct head."""
    if problem.virtual_stages != 1:
        raise ValueError("solve_tail covers one chunk per stage")
    p, layers = problem.num_stages, problem.num_layers
    head = identical_tail_start(problem)
    if not _any_partition_fits(problem, head):
        return None
    tail = _Tail(problem, head)
    time_ns, stage_state = tail.time_ns, tail.stage_state

    def feasible(bound_ns: np.ndarray, bound_kib: np.ndarray | float = UNREACHABLE) -> np.ndarray:
        """Per bound (pairs of bottleneck and state bounds): some partition keeps within it."""
        bound_ns, bound_kib = np.broadcast_arrays(np.asarray(bound_ns, dtype=np.float64), bound_kib)
        allowed = (time_ns <= bound_ns[:, None, None, None]) & (stage_state <= bound_kib[:, None, None, None])
        return _reaches_end(allowed.sum(axis=-1), layers)

    # The full table's values are the head rows' (a later start repeats row D's values).
    average = (sum(problem.layer_time_ns) + sum(problem.stage_extra_time_ns)) / p
    top = float(upper_bound_ns) if upper_bound_ns is not None else float(np.max(time_ns, initial=0, where=np.isfinite(time_ns)))
    window = time_ns[(time_ns >= np.floor(average)) & (time_ns <= top)]
    candidates = sorted_unique(window)
    if candidates.size == 0 or not feasible(candidates[-1:])[0]:
        if upper_bound_ns is not None:
            return solve_tail(problem)  # the given bound was not feasible here: search everything
        return None
    bottleneck = _least(candidates, feasible)
    usable = time_ns <= bottleneck
    states = sorted_unique(stage_state[usable])
    best_state = _least(states, lambda bounds: feasible(np.full(len(bounds), bottleneck), bounds))
    max_end = _max_end((usable & (stage_state <= best_state)).sum(axis=-1), layers)
    reach = _reachable(max_end)

    counts, recompute = [0] * p, [0] * p
    end = layers
    for stage in range(p - 1, -1, -1):  # read back: the latest start that reaches this end
        starts = np.flatnonzero(reach[stage][:end] & (max_end[stage, :end] >= end))
        start = int(starts[-1])
        counts[stage], recompute[stage] = end - start, int(tail.entry(tail.recomputed, stage, start, end))
        end = start
    bounds = np.concatenate(([0], np.cumsum(counts)))
    worst_time = max(float(tail.entry(time_ns, s, int(bounds[s]), int(bounds[s + 1]))) for s in range(p))
    worst_state = max(float(tail.entry(stage_state, s, int(bounds[s]), int(bounds[s + 1]))) for s in range(p))
    return PartitionSolution(tuple(counts), tuple(recompute), int(worst_time), int(worst_state), PartitionMethod.CHAIN, SolveStatus.OPTIMAL)


def _any_partition_fits(problem: PartitionProblem, head: int) -> bool:
    """``chain._any_partition_fits`` from the head rows."""
    fits = fits_table(problem, np.arange(head + 1))
    return fits is None or bool(_reaches_end(fits.sum(axis=-1), problem.num_layers))


def tail_bottleneck_lower_bound_ns(problem: PartitionProblem) -> int:
    """No partition of ``problem`` (one chunk per stage) has a slowest stage faster than this,
    memory counted: a relaxation that keeps only the chain's identical tail (layers D..L-1, D =
    ``identical_tail_start``) and lets its L - D layers go to any stage in any number, each stage
    recomputing the least of them that fits. ``INFEASIBLE_NS`` where even that has no plan.

    Why it is a lower bound (a relaxation of every solver's model, ``solver.partition.fixed``
    and the chain programs alike): take any feasible partition with bottleneck T, stage s holding
    n_s tail layers (sum L - D), some of them among its recomputed ones. Dropping the stage's head
    layers removes time (each >= 0) and memory (model states plus in-flight activations or
    checkpoints, each >= 0); its recomputed tail layers save what recomputing them saves, and the
    working set is counted only where one of them is recomputed (which the real stage then
    counts too). So n_s tail layers fit stage s with as many recomputed, within T, and with the
    least count that fits (identical layers: which ones does not matter) at least as fast: the
    relaxed stage time c_s(n_s) = e_s + n_s t + k(n_s) r is at most the real one, and a stage
    with no tail layer still runs its extras and one of the D head layers (c_s(0) = e_s + the
    fastest layer). Hence T >= c_s(n_s) for every s.

    The least T with such counts (each stage's relaxed times made nondecreasing in n by taking
    the least over larger counts, which only lowers them): every stage within T at some count
    (T >= max c_s(0) where there is a head), at most D stages without a tail layer (T at least
    the (p - D)-th least c_s(1)), and the counts within T summing to L - D (T at least the
    (L - D)-th least c_s(n), n >= 1, over all stages). Memory sums are the solvers'
    (``stage_memory_kib``) with the closed form of the least recompute taken a little low
    (``least_recompute`` less a margin), which only weakens the bound."""
    p, layers = problem.num_stages, problem.num_layers
    if problem.virtual_stages != 1:
        raise ValueError("tail_bottleneck_lower_bound_ns covers one chunk per stage")
    if layers == 0:
        return 0
    head = identical_tail_start(problem)
    count = layers - head
    t, r = problem.layer_time_ns[-1], problem.layer_recompute_ns[-1]
    kept, ckpt, state = problem.layer_kept_kib[-1], problem.layer_checkpoint_kib[-1], problem.layer_state_kib[-1]
    if min(t, r, kept, ckpt, state, min(problem.in_flight), min(problem.stage_working_kib)) < 0:
        return 0  # outside the model's signs: no claim
    n = np.arange(count + 1, dtype=np.float64)
    in_flight = np.asarray(problem.in_flight, dtype=np.float64)[:, None]
    budget = np.asarray(problem.stage_budget_kib, dtype=np.float64)[:, None]
    without = stage_memory_kib(in_flight, n * kept, n * state, 0)
    recomputed = np.where(without <= budget, 0.0, UNREACHABLE)
    if problem.allow_recompute and kept > ckpt:
        working = np.asarray(problem.stage_working_kib, dtype=np.float64)[:, None]
        needed = np.maximum(1.0, np.ceil((without + working - budget) / np.maximum(in_flight * (kept - ckpt), 1e-30) - 1e-6))
        recomputed = np.minimum(recomputed, np.where(needed <= n, needed, UNREACHABLE))
    extra = np.asarray(problem.stage_extra_time_ns, dtype=np.float64)[:, None]
    relaxed = extra + n * t + recomputed * r if r else np.where(np.isfinite(recomputed), extra + n * t, UNREACHABLE)
    # No tail layer: the stage holds head layers (at least one; there are none without a head).
    relaxed[:, 0] = np.where(budget[:, 0] >= 0, extra[:, 0] + min(problem.layer_time_ns), UNREACHABLE) if head else UNREACHABLE
    relaxed = np.minimum.accumulate(relaxed[:, ::-1], axis=1)[:, ::-1]
    bound = np.partition(relaxed[:, 1:], count - 1, axis=None)[count - 1]
    if head:
        bound = max(bound, relaxed[:, 0].max())
    if p > head:
        bound = max(bound, np.partition(relaxed[:, 1], p - head - 1)[p - head - 1])
    return int(bound) if np.isfinite(bound) else INFEASIBLE_NS
