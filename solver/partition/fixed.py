"""Given layer counts per chunk: the least full recomputation per stage that fits."""

from __future__ import annotations

from itertools import accumulate

from solver.partition.problem import (
    PartitionMethod,
    PartitionProblem,
    PartitionSolution,
    SolveStatus,
    least_recompute,
    stage_memory_kib,
)


def _chunk_starts(counts: tuple[int, ...]) -> list[int]:
    return [0, *accumulate(counts)][:-1]


def _spread(total: int, parts: int) -> list[int]:
    """``total`` recomputed layers over a stage's chunks, earlier chunks first."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


class _Sums:
    """Prefix sums of a problem's integer layer rows: a range's sum in two lookups (the same
    integers as adding its layers one by one)."""

    def __init__(self, problem: PartitionProblem) -> None:
        self.time = [0, *accumulate(problem.layer_time_ns)]
        self.recompute = [0, *accumulate(problem.layer_recompute_ns)]
        self.kept = [0, *accumulate(problem.layer_kept_kib)]
        self.checkpoint = [0, *accumulate(problem.layer_checkpoint_kib)]
        self.state = [0, *accumulate(problem.layer_state_kib)]


def stage_cost(
    problem: PartitionProblem, stage: int, chunks: list[tuple[int, int]], recomputed: list[int], sums: _Sums | None = None
) -> tuple[int, float, int]:
    """(time ns, memory KiB, model state KiB) of one stage holding ``chunks`` (first layer,
    count) with the first ``recomputed[j]`` layers of chunk j fully recomputed. ``sums``: the
    problem's prefix sums, where the caller costs many stages."""
    if problem.identical_layers:
        return _identical_stage_cost(problem, stage, chunks, recomputed)
    sums = sums or _Sums(problem)
    time_ns = problem.stage_extra_time_ns[stage]
    kept = 0
    layers_state = 0
    for (first, count), k in zip(chunks, recomputed):
        end, split = first + count, first + min(k, count)  # layers first .. split - 1 are recomputed
        time_ns += sums.time[end] - sums.time[first] + sums.recompute[split] - sums.recompute[first]
        kept += sums.checkpoint[split] - sums.checkpoint[first] + sums.kept[end] - sums.kept[split]
        layers_state += sums.state[end] - sums.state[first]
    working = problem.stage_working_kib[stage] if any(recomputed) else 0
    memory = stage_memory_kib(problem.in_flight[stage], kept, layers_state, working)
    return time_ns, memory, problem.stage_extra_state_kib[stage] + layers_state


def _identical_stage_cost(
    problem: PartitionProblem, stage: int, chunks: list[tuple[int, int]], recomputed: list[int]
) -> tuple[int, float, int]:
    """``stage_cost`` for identical layers: the same integer sums, as products."""
    held = sum(count for _, count in chunks)
    full = sum(min(k, count) for (_, count), k in zip(chunks, recomputed))
    time_ns = problem.stage_extra_time_ns[stage] + held * problem.layer_time_ns[0] + full * problem.layer_recompute_ns[0]
    kept = full * problem.layer_checkpoint_kib[0] + (held - full) * problem.layer_kept_kib[0]
    layers_state = held * problem.layer_state_kib[0]
    working = problem.stage_working_kib[stage] if any(recomputed) else 0
    memory = stage_memory_kib(problem.in_flight[stage], kept, layers_state, working)
    return time_ns, memory, problem.stage_extra_state_kib[stage] + layers_state


def fixed_partition(problem: PartitionProblem, chunk_layers: tuple[int, ...]) -> PartitionSolution | None:
    """The least recomputation that fits each stage for given layer counts per chunk (pipeline
    order), or None when a stage cannot fit even recomputing all of its layers. Each stage takes
    the smallest number of recomputed layers that fits, spread over its chunks earlier first
    (exact for identical layers: memory and time depend only on that number)."""
    p = problem.num_stages
    if problem.identical_layers:
        return _identical(problem, chunk_layers)
    starts = _chunk_starts(chunk_layers)
    sums = _Sums(problem)
    recompute = [0] * len(chunk_layers)
    worst_time, worst_state = 0, 0
    # No layer's checkpoint is larger than what it keeps otherwise (and no in-flight count is
    # negative, no chunk empty): a stage's memory then falls as it recomputes more (_least_total).
    shrinks = (
        all(c <= k for k, c in zip(problem.layer_kept_kib, problem.layer_checkpoint_kib))
        and min(problem.in_flight) >= 0 and min(chunk_layers) >= 1
    )
    for stage in range(p):
        chunks = [(starts[c], chunk_layers[c]) for c in range(stage, len(chunk_layers), p)]
        total = _least_total(problem, stage, chunks, sums, shrinks)
        if total is None:
            return None
        counts, (time_ns, _memory, state) = _recomputing(problem, stage, chunks, sums, total)
        recompute[stage::p] = counts
        worst_time, worst_state = max(worst_time, time_ns), max(worst_state, state)
    return PartitionSolution(tuple(chunk_layers), tuple(recompute), worst_time, worst_state, PartitionMethod.FIXED, SolveStatus.FIXED)


def _recomputing(
    problem: PartitionProblem, stage: int, chunks: list[tuple[int, int]], sums: _Sums, total: int
) -> tuple[list[int], tuple[int, float, int]]:
    """The stage's recomputed layers per chunk when it recomputes ``total`` (spread over its
    chunks earlier first, at most each chunk's layers), and ``stage_cost`` with them."""
    counts = [min(k, count) for k, (_, count) in zip(_spread(total, len(chunks)), chunks)]
    return counts, stage_cost(problem, stage, chunks, counts, sums)


def _least_total(problem: PartitionProblem, stage: int, chunks: list[tuple[int, int]], sums: _Sums, shrinks: bool) -> int | None:
    """The least number of the stage's layers to recompute for it to fit, or None. ``shrinks``:
    the stage's memory falls (weakly) as the number grows from 1, so those that fit are a suffix
    of 1..held and bisection finds the least (the number trying each in turn finds)."""
    held = sum(count for _, count in chunks)
    budget = problem.stage_budget_kib[stage]

    def fits(total: int) -> bool:
        return _recomputing(problem, stage, chunks, sums, total)[1][1] <= budget

    if len(chunks) == 1 and not problem.identical_layers:
        # One chunk (no interleaving): ``stage_cost``'s memory alone, with the same integer sums.
        (first, count), = chunks
        end = first + count
        in_flight, working_kib = problem.in_flight[stage], problem.stage_working_kib[stage]
        layers_state = sums.state[end] - sums.state[first]

        def fits(total: int) -> bool:
            split = first + min(total, count)
            kept = sums.checkpoint[split] - sums.checkpoint[first] + sums.kept[end] - sums.kept[split]
            return stage_memory_kib(in_flight, kept, layers_state, working_kib if split > first else 0) <= budget

    totals = range(held + 1 if problem.allow_recompute else 1)
    if not shrinks or len(totals) <= 2 or fits(0):
        return next((total for total in totals if fits(total)), None)
    lo, hi = 1, held
    if not fits(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _identical(problem: PartitionProblem, chunk_layers: tuple[int, ...]) -> PartitionSolution | None:
    """``fixed_partition`` for identical layers, step for step with ``stage_cost``'s sums as
    products: a stage's time and memory depend only on how many of its layers it holds and
    recomputes."""
    p = problem.num_stages
    t, r = problem.layer_time_ns[0], problem.layer_recompute_ns[0]
    kept, ckpt, state = problem.layer_kept_kib[0], problem.layer_checkpoint_kib[0], problem.layer_state_kib[0]
    recompute = [0] * len(chunk_layers)
    worst_time, worst_state = 0, 0
    for stage in range(p):
        mine = chunk_layers[stage::p]
        held = sum(mine)
        least = _least_recompute(problem, stage, held)
        if least is None:
            return None
        f, budget = problem.in_flight[stage], problem.stage_budget_kib[stage]
        if least == 0:  # fits without recomputing (what the loop below checks first): no layer recomputed
            worst_time = max(worst_time, problem.stage_extra_time_ns[stage] + held * t)
            worst_state = max(worst_state, problem.stage_extra_state_kib[stage] + held * state)
            continue
        for total in range(least, held + 1 if problem.allow_recompute else 1):
            counts = [min(k, n) for k, n in zip(_spread(total, len(mine)), mine)]
            full = sum(counts)
            working = problem.stage_working_kib[stage] if any(counts) else 0
            if stage_memory_kib(f, full * ckpt + (held - full) * kept, held * state, working) <= budget:
                break
        else:
            return None
        recompute[stage::p] = counts
        worst_time = max(worst_time, problem.stage_extra_time_ns[stage] + held * t + full * r)
        worst_state = max(worst_state, problem.stage_extra_state_kib[stage] + held * state)
    return PartitionSolution(tuple(chunk_layers), tuple(recompute), worst_time, worst_state, PartitionMethod.FIXED, SolveStatus.FIXED)


def _least_recompute(problem: PartitionProblem, stage: int, held: int) -> int | None:
    """Identical layers: the least number of the stage's ``held`` layers to recompute so that it
    fits (closed form of the memory bound), None when recomputing all of them does not fit."""
    kept, ckpt, state = problem.layer_kept_kib[0], problem.layer_checkpoint_kib[0], problem.layer_state_kib[0]
    f, budget = problem.in_flight[stage], problem.stage_budget_kib[stage]
    without = stage_memory_kib(f, held * kept, held * state, 0)
    if without <= budget:
        return 0
    if not problem.allow_recompute or kept <= ckpt:
        return None
    least = int(least_recompute(without, problem.stage_working_kib[stage], budget, f * (kept - ckpt)))
    return least if least <= held else None
