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
from solver.partition.problem import PartitionMethod, PartitionProblem, PartitionSolution, SolveStatus


def identical_tail_start(problem: PartitionProblem) -> int:
    """D: the first layer from which every layer is identical to the last (L - 1 when the last
    two differ)."""
    rows = (problem.layer_time_ns, problem.layer_recompute_ns, problem.layer_kept_kib, problem.layer_checkpoint_kib, problem.layer_state_kib)
    layers = problem.num_layers
    if layers == 0:
        return -1
    start = 0  # the least start that every row read so far allows
    for row in rows:  # each row from its end, down to the start the earlier rows need
        last, layer = row[-1], layers - 2
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
