"""The fast exact partition for identical transformer layers (every analytic profile).

Stages are then interchangeable except for their in-flight count and extras, so a bottleneck T is
feasible iff the per-stage maximal layer counts under T sum to at least L: binary search over the
finite set of stage times, then a water-fill for the secondary objective. O(p L) with numpy."""

from __future__ import annotations

import numpy as np

from solver.partition.chain import sorted_unique
from solver.partition.problem import (
    INFEASIBLE_NS,
    PartitionMethod,
    PartitionProblem,
    PartitionSolution,
    SolveStatus,
    least_recompute,
    stage_memory_kib,
    stage_time_ns,
)


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
    without = stage_memory_kib(in_flight, n * kept, n * state, 0)
    fits_plain = without <= budget
    saving = in_flight * (kept - ckpt)  # memory saved by each recomputed layer
    if problem.allow_recompute and kept > ckpt:
        working = np.array(problem.stage_working_kib, dtype=np.float64)[:, None]
        needed = least_recompute(without, working, budget, saving)
    else:
        needed = np.full(without.shape, np.inf)
    recomputed = np.where(fits_plain, 0, needed)
    ok = recomputed <= n
    recomputed = np.where(ok, recomputed, 0).astype(np.int64)
    extra = np.array(problem.stage_extra_time_ns, dtype=np.int64)[:, None]
    time_ns = np.where(ok, stage_time_ns(n * t, recomputed * r, extra), INFEASIBLE_NS)
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

    candidates = sorted_unique(time_ns[time_ns < INFEASIBLE_NS])
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

    levels = sorted_unique((np.arange(1, n_max + 1)[None, :] * state + extra_state[:, None]).ravel())
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
    return PartitionSolution(tuple(counts), recompute, worst_time, worst_state, PartitionMethod.FAST, SolveStatus.OPTIMAL)

def _feasible(caps: np.ndarray, layers: int) -> bool:
    return bool(caps.min() >= 1 and caps.sum() >= layers)
