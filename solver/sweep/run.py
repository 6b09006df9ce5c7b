"""The best plan of every sweep point, through the optimizer (``solver.search.loop.find_plans``:
the search without the explanation of an infeasible point, which a sweep reports as infeasible
and moves on).

Points can be planned in a few processes (``workers``): contiguous chunks of the sweep's order,
so a process plans neighbouring GPU counts of one cluster and reuses the analytic profiles it
has already built for that GPU, and what the search derives from them.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace

from solver.search.loop import find_plans
from solver.search.request import SearchRequest
from solver.search.space import Profiles
from solver.spec.parallel import ParallelConfig
from solver.sweep.analysis import PointResult
from solver.sweep.grid import GridPoint

# Points handed to a worker at a time: large enough to keep a cluster's profiles warm, small
# enough that two workers finish together.
CHUNK_POINTS = 3


@dataclass(frozen=True)
class PlannedPoint:
    """A point's figures and, when it has one, its best configuration."""

    result: PointResult
    parallel: ParallelConfig | None


def price_usd(request: SearchRequest) -> float | None:
    """The request's GPU-hour price, else the cluster's (None: neither has one)."""
    return request.gpu_hour_price_usd if request.gpu_hour_price_usd is not None else request.cluster.gpu_hour_price_usd


def plan_point(point: GridPoint, request: SearchRequest) -> PlannedPoint:
    """The best plan for one point (``request`` already carries its GPU count and batch)."""
    return _plan_point(point, request, None)[0]


def _plan_point(point: GridPoint, request: SearchRequest, profiles: Profiles | None) -> tuple[PlannedPoint, Profiles]:
    """``plan_point``, sharing ``profiles`` (an earlier point's search caches) where they serve
    this point; also the caches it used."""
    request = replace(request, top_k=1)
    held, run = find_plans(request, profiles)
    best = held[0] if held else None
    result = PointResult.planned(
        point.cluster, best.num_gpus if best else point.num_gpus, point.global_batch_size,
        best.evaluation.prediction if best else None, price_usd(request),
    )
    return PlannedPoint(result, best.parallel if best else None), run.profiles


def _plan_chunk(chunk: list[tuple[GridPoint, SearchRequest]]) -> list[PlannedPoint]:
    """Neighbouring points, each sharing the previous one's profile caches where it can (the
    same model and GPU type at another count)."""
    planned: list[PlannedPoint] = []
    profiles: Profiles | None = None
    for point, request in chunk:
        point_plan, profiles = _plan_point(point, request, profiles)
        planned.append(point_plan)
    return planned


def plan_points(tasks: Sequence[tuple[GridPoint, SearchRequest]], workers: int = 1) -> list[PlannedPoint]:
    """Every point's best plan, in the order given; ``workers`` > 1 plans chunks of
    ``CHUNK_POINTS`` neighbouring points in that many spawned processes."""
    if workers <= 1 or len(tasks) <= CHUNK_POINTS:
        return _plan_chunk(list(tasks))
    chunks = [list(tasks[i : i + CHUNK_POINTS]) for i in range(0, len(tasks), CHUNK_POINTS)]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as executor:
        return [planned for chunk in executor.map(_plan_chunk, chunks) for planned in chunk]
