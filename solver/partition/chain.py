"""Exact partition of a chain of non-identical layers (measured profiles), one chunk per stage.

A dynamic program over stage boundaries, vectorised with numpy. For stage i and every layer
range [a, b) it first finds the least number of leading layers to recompute so the range fits
(memory falls as more layers are recomputed, so a binary search per range), which gives the
range's time. Under a bottleneck T the ranges that stage i can take from a start a are
[a, a + 1) ... [a, maxend_i(a)) (time and memory grow with b). The boundaries reachable after
i + 1 stages are then {b : some reachable a < b has maxend_i(a) >= b}, one prefix maximum per
stage. T is feasible iff the last boundary L is reachable after p stages; the least feasible T
is found by bisection over the table's stage times (between the average stage and a known
feasible bottleneck), then the largest stage state the same way with T fixed, and the
boundaries are read back from the reachable sets.

Cost: O(p L^2 log L) once per problem for the range tables, O(p L^2) per bisection step.
Exact for the same model as ``solver.partition`` and ``solver.partition.cpsat`` (tests compare the
three).
"""

from __future__ import annotations

import numpy as np

from solver.partition.problem import (
    PartitionMethod,
    PartitionProblem,
    PartitionSolution,
    SolveStatus,
    least_recompute,
    stage_memory_kib,
    stage_time_ns,
)

UNREACHABLE = np.inf
# Stages are tabled in blocks of about this many (stage, start, end) entries: one numpy pass per
# block rather than per stage, a few MiB per temporary array.
TABLE_BLOCK_ENTRIES = 1 << 18


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)``: the sorted distinct values. Without NaNs (the solvers' tables have
    none) by sorting and dropping repeats, since ``np.unique`` imports numpy.ma on its first call
    (a CLI plan would load it for this alone); with NaNs by ``np.unique`` itself."""
    ordered = np.sort(values, axis=None)
    if ordered.size and ordered.dtype.kind in "cfmM" and np.isnan(ordered[-1]):
        return np.unique(values)  # NaNs sort last; np.unique's rule counts them as one
    keep = np.empty(ordered.shape, dtype=bool)
    keep[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def _prefix(values: tuple[int, ...]) -> np.ndarray:
    return np.concatenate(([0.0], np.cumsum(np.asarray(values, dtype=np.float64))))


def range_tables(problem: PartitionProblem, starts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """time_ns[i, a, b - 1], recomputed[i, a, b - 1] for every stage i and range [a, b)
    (inf where the range cannot fit or b <= a), and state_kib[a, b - 1] of the range's layers.
    ``starts``: the starts a to table (every layer by default); row j is then start starts[j]."""
    p, layers = problem.num_stages, problem.num_layers
    time_p, recompute_p = _prefix(problem.layer_time_ns), _prefix(problem.layer_recompute_ns)
    kept_p, ckpt_p, state_p = _prefix(problem.layer_kept_kib), _prefix(problem.layer_checkpoint_kib), _prefix(problem.layer_state_kib)
    a = (np.arange(layers) if starts is None else starts)[:, None]
    b = np.arange(1, layers + 1)[None, :]
    valid = b > a
    held = np.where(valid, b - a, 0)
    state = state_p[b] - state_p[a]

    rows = (problem.layer_kept_kib, problem.layer_checkpoint_kib, problem.layer_state_kib)
    same_memory = all(row.count(row[0]) == len(row) for row in rows)
    time_ns = np.full((p, a.shape[0], layers), UNREACHABLE)
    recomputed = np.zeros((p, a.shape[0], layers), dtype=np.int64)
    in_flight = np.asarray(problem.in_flight, dtype=np.float64)[:, None, None]
    budgets = np.asarray(problem.stage_budget_kib, dtype=np.int64)[:, None, None]
    stage_working = np.asarray(problem.stage_working_kib, dtype=np.int64)[:, None, None]
    extra_ns = np.asarray(problem.stage_extra_time_ns, dtype=np.int64)[:, None, None]
    block = max(1, TABLE_BLOCK_ENTRIES // (a.shape[0] * layers))
    for first in range(0, p, block):  # a block of stages at a time, elementwise as one stage
        stages = slice(first, min(p, first + block))
        f, budget, working = in_flight[stages], budgets[stages], stage_working[stages]

        def memory(k: np.ndarray, f: np.ndarray = f, working: np.ndarray = working) -> np.ndarray:  # these stages' counts
            split = np.minimum(a + k, b)
            kept = ckpt_p[split] - ckpt_p[a] + kept_p[b] - kept_p[split]
            return stage_memory_kib(f, kept, state, np.where(k > 0, working, 0))

        none = np.zeros(f.shape[:1] + held.shape, dtype=held.dtype)
        held_here = none + held
        plain = valid & (memory(none) <= budget)
        if problem.allow_recompute and same_memory:
            # Memory rows identical (a measured profile whose times vary): closed form for k.
            kept, ckpt = problem.layer_kept_kib[0], problem.layer_checkpoint_kib[0]
            needed = least_recompute(memory(none), working, budget, f * (kept - ckpt))
            needed = needed.astype(np.int64)
            possible = valid & ~plain & (kept > ckpt) & (needed <= held)
            k = np.where(plain, 0, np.where(possible, needed, 0))
            fits_at_all = plain | possible
        elif problem.allow_recompute:
            possible = valid & ~plain & (memory(held_here) <= budget)
            lo, hi = np.ones_like(held_here), np.maximum(held_here, 1)
            while np.any(possible & (lo < hi)):  # least k in [1, held] that fits
                mid = (lo + hi) // 2
                fits = memory(mid) <= budget
                hi = np.where(possible & fits, mid, hi)
                lo = np.where(possible & ~fits, mid + 1, lo)
            k = np.where(plain, 0, lo)
            fits_at_all = plain | possible
        else:
            k = none
            fits_at_all = plain
        split = np.minimum(a + k, b)
        time = stage_time_ns(time_p[b] - time_p[a], recompute_p[split] - recompute_p[a], extra_ns[stages])
        time_ns[stages] = np.where(fits_at_all, time, UNREACHABLE)
        recomputed[stages] = np.where(fits_at_all, k, 0)
    return time_ns, recomputed, np.where(valid, state, UNREACHABLE)


def _any_partition_fits(problem: PartitionProblem) -> bool:
    """Whether some partition fits at all, before the range tables are built (``fits_table``).
    Checked only where layers differ in memory (the tables' binary search is the costly part);
    True otherwise."""
    fits = fits_table(problem)
    return fits is None or bool(_reachable(fits)[-1][problem.num_layers])


def fits_table(problem: PartitionProblem, starts: np.ndarray | None = None) -> np.ndarray | None:
    """fits[i, a, b - 1]: range [a, b) fits stage i without recomputation, or with every one of
    its layers recomputed (the least memory a range can take), exactly as ``range_tables``
    decides ``fits_at_all``; rows are ``starts`` as there. None where every layer has the same
    memory rows (nothing to check ahead of the tables)."""
    rows = (problem.layer_kept_kib, problem.layer_checkpoint_kib, problem.layer_state_kib)
    if all(row.count(row[0]) == len(row) for row in rows):
        return None
    p, layers = problem.num_stages, problem.num_layers
    kept_p, ckpt_p, state_p = _prefix(problem.layer_kept_kib), _prefix(problem.layer_checkpoint_kib), _prefix(problem.layer_state_kib)
    a = (np.arange(layers) if starts is None else starts)[:, None]
    b = np.arange(1, layers + 1)[None, :]
    valid = b > a
    state = state_p[b] - state_p[a]
    fits = np.zeros((p, a.shape[0], layers), dtype=bool)
    in_flight = np.asarray(problem.in_flight, dtype=np.float64)[:, None, None]
    budgets = np.asarray(problem.stage_budget_kib, dtype=np.int64)[:, None, None]
    working = np.asarray(problem.stage_working_kib, dtype=np.int64)[:, None, None]
    kept, checkpoints = kept_p[b] - kept_p[a], ckpt_p[b] - ckpt_p[a]
    block = max(1, TABLE_BLOCK_ENTRIES // (a.shape[0] * layers))
    for first in range(0, p, block):  # a block of stages at a time, as range_tables does
        stages = slice(first, min(p, first + block))
        f, budget = in_flight[stages], budgets[stages]
        fits[stages] = valid & (stage_memory_kib(f, kept, state, 0) <= budget)
        if problem.allow_recompute:
            fits[stages] |= valid & (stage_memory_kib(f, checkpoints, state, working[stages]) <= budget)
    return fits


def _reachable(allowed: np.ndarray) -> list[np.ndarray]:
    """reach[i][b]: boundary b is reachable after i stages using only ``allowed`` ranges
    (allowed[i, a, b - 1]); each stage's allowed ranges from a start are a prefix in b."""
    p, layers, _ = allowed.shape
    starts = np.arange(layers)
    reach = [np.zeros(layers + 1, dtype=bool)]
    reach[0][0] = True
    for stage in range(p):
        max_end = starts + allowed[stage].sum(axis=1)  # the furthest b reachable from a
        from_reachable = np.where(reach[-1][:layers], max_end, -1)
        furthest = np.maximum.accumulate(from_reachable)  # over starts a' <= a
        nxt = np.zeros(layers + 1, dtype=bool)
        nxt[1:] = furthest >= np.arange(1, layers + 1)  # some reachable a < b reaches b
        reach.append(nxt)
    return reach


def least_feasible(values: np.ndarray, feasible) -> int:
    """The least of the sorted candidate ``values`` for which ``feasible`` holds (the last
    one is known to hold)."""
    lo, hi = 0, len(values) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if feasible(int(values[mid])):
            hi = mid
        else:
            lo = mid + 1
    return int(values[lo])


def solve_chain(problem: PartitionProblem, upper_bound_ns: int | None = None) -> PartitionSolution | None:
    """The optimal partition (least bottleneck, then least largest stage state), or None.
    ``upper_bound_ns``: the bottleneck of a known feasible partition (e.g. the uniform one),
    which narrows the bisection to the stage times between the average stage and it."""
    if problem.virtual_stages != 1:
        raise ValueError("solve_chain covers one chunk per stage")
    p, layers = problem.num_stages, problem.num_layers
    if not _any_partition_fits(problem):
        return None
    time_ns, recomputed, state = range_tables(problem)
    extra_state = np.asarray(problem.stage_extra_state_kib, dtype=np.float64)[:, None, None]
    stage_state = state[None, :, :] + extra_state

    def feasible(bound_ns: float, bound_kib: float = UNREACHABLE) -> list[np.ndarray] | None:
        reach = _reachable((time_ns <= bound_ns) & (stage_state <= bound_kib))
        return reach if reach[-1][layers] else None

    # Every stage's time is one of the table's values; the slowest is at least the average stage.
    average = (sum(problem.layer_time_ns) + sum(problem.stage_extra_time_ns)) / p
    top = float(upper_bound_ns) if upper_bound_ns is not None else float(np.max(time_ns, initial=0, where=np.isfinite(time_ns)))
    window = time_ns[(time_ns >= np.floor(average)) & (time_ns <= top)]
    candidates = sorted_unique(window)
    if candidates.size == 0 or feasible(float(candidates[-1])) is None:
        if upper_bound_ns is not None:
            return solve_chain(problem)  # the given bound was not feasible here: search everything
        return None
    bottleneck = least_feasible(candidates, lambda bound: feasible(bound) is not None)
    usable = time_ns <= bottleneck
    states = sorted_unique(stage_state[usable])
    best_state = least_feasible(states, lambda bound: feasible(bottleneck, bound) is not None)
    allowed = usable & (stage_state <= best_state)
    reach = _reachable(allowed)

    counts, recompute = [0] * p, [0] * p
    end = layers
    for stage in range(p - 1, -1, -1):  # read back: the latest start that reaches this end
        starts = [a for a in range(end) if reach[stage][a] and allowed[stage, a, end - 1]]
        start = max(starts)
        counts[stage], recompute[stage] = end - start, int(recomputed[stage, start, end - 1])
        end = start
    worst_time = max(float(time_ns[s, sum(counts[:s]), sum(counts[: s + 1]) - 1]) for s in range(p))
    worst_state = max(float(stage_state[s, sum(counts[:s]), sum(counts[: s + 1]) - 1]) for s in range(p))
    return PartitionSolution(tuple(counts), tuple(recompute), int(worst_time), int(worst_state), PartitionMethod.CHAIN, SolveStatus.OPTIMAL)
