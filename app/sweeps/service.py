"""Sweeps: expand the grid, plan every point as an ordinary plan (through the plans service, so
each is stored, idempotent and searched in the solver pool), analyse the points and store the
sweep.

Points run synchronously within the request, as many at once as the pool has solver processes
(each in a thread with its own database session); with ``Prefer: respond-async`` they run as a
job instead (app.jobs: ``prepare`` before, ``store_sweep`` after).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

import catalog
from app.catalog.resolve import builtin_names
from app.catalog.service import find_entry, resolve
from app.core.config import Settings
from app.core.db import utc_now
from app.core.metrics import Metrics
from app.core.ownership import ANYONE, Access
from app.core.problems import Problem, from_spec_error, invalid_field, not_found
from app.core.single_flight import SingleFlight
from app.core.solver_pool import InlineSolver, SolverPool
from app.core.versions import Versions
from app.evaluations.schemas import Training
from app.plans import service as plans_service
from app.plans.schemas import Plan, PlanRequest
from app.sweeps import repository, schemas
from app.sweeps.models import Sweep, SweepPoint
from solver.spec.errors import SpecError
from solver.sweep.analysis import PointResult, SweepAnalysis, analyse
from solver.sweep.chart import pareto_chart, scaling_chart
from solver.sweep.grid import GridPoint, GridRange, expand

SessionFactory = Callable[[], Session]


@dataclass(frozen=True)
class _Price:
    gpu_hour_price_usd: float | None
    source: str
    pass_to_plan: bool  # the plan request must carry it (the cluster's own entry has none, or another)


@dataclass(frozen=True)
class _Task:
    point: GridPoint
    plan_request: PlanRequest | None  # None: not plannable (see note)
    note: str | None


def grid_axis(value: int | list[int] | schemas.SweepRange) -> int | list[int] | GridRange:
    if isinstance(value, schemas.SweepRange):
        return GridRange(value.min, value.max, value.step, value.factor)
    return value


def _clusters(body: schemas.SweepRequest) -> list[str]:
    return [body.cluster] if isinstance(body.cluster, str) else list(body.cluster)


def _grid(body: schemas.SweepRequest) -> list[GridPoint]:
    if body.constraints.model_dump(exclude_none=True).get("num_gpus") is not None:
        raise invalid_field("body.constraints.num_gpus", "a sweep sets num_gpus per point; give it as the num_gpus axis")
    try:
        return expand(_clusters(body), grid_axis(body.num_gpus), grid_axis(body.training.global_batch_size))
    except SpecError as error:
        raise from_spec_error(error, "body") from None


def point_count(body: schemas.SweepRequest) -> int:
    """How many points the sweep has (a 422 naming the field if its axes are malformed)."""
    return len(_grid(body))


def _node_names() -> set[str]:
    return set(builtin_names("nodes"))


def catalog_price(session: Session, name: str) -> tuple[float | None, str, bool]:
    """A cluster's GPU-hour price from the catalog, where it came from, and whether the cluster's
    own entry lacks it (a node type priced as the first catalog cluster of that node type)."""
    entry = find_entry(session, "clusters", name)
    if entry is not None:
        own = entry.get("gpu_hour_price_usd")
        return own, (f"the catalog cluster {name}" if own is not None else "none: the catalog entry has no price"), False
    if name in _node_names():
        priced = [c for c in catalog.list_entries("clusters") if c.get("node") == name and c.get("gpu_hour_price_usd")]
        if priced:
            return priced[0]["gpu_hour_price_usd"], f"the catalog cluster {priced[0]['name']} (same node type)", True
        return None, f"none: no catalog cluster of the node type {name} has a price", False
    return None, "none: the catalog entry has no price", False


def _prices(session: Session, body: schemas.SweepRequest, clusters: list[str]) -> dict[str, _Price]:
    """Each cluster's GPU-hour price: the request's, else its catalog entry's, else (a node type)
    the first catalog cluster of that node type with a price."""
    given: dict[str, float] = {}
    if isinstance(body.gpu_hour_price_usd, (int, float)):
        given = {name: body.gpu_hour_price_usd for name in clusters}
    elif body.gpu_hour_price_usd is not None:
        for index, item in enumerate(body.gpu_hour_price_usd):
            if item.cluster not in clusters:
                raise invalid_field(f"body.gpu_hour_price_usd.{index}.cluster", f"{item.cluster!r} is not one of the sweep's clusters")
            given[item.cluster] = item.gpu_hour_price_usd
    prices = {}
    for name in clusters:
        price, source, borrowed = catalog_price(session, name)
        if name in given:
            own = None if borrowed else price
            prices[name] = _Price(given[name], "the request", pass_to_plan=given[name] != own)
        else:
            prices[name] = _Price(price, source, pass_to_plan=borrowed)
    return prices


def _tasks(session: Session, body: schemas.SweepRequest, grid: list[GridPoint], prices: dict[str, _Price]) -> list[_Task]:
    """The plan request of every point; a point with more GPUs than its (named) cluster has is
    not planned. Unknown names are a 422 naming the field."""
    training = body.training.model_dump(exclude_none=True)
    constraints = body.constraints.model_dump(exclude_none=True)
    sizes: dict[str, int | None] = {}
    for index, name in enumerate(_clusters(body)):
        field = "body.cluster" if isinstance(body.cluster, str) else f"body.cluster.{index}"
        try:
            resolved = resolve(session, body.model, name)
        except Problem as problem:
            if problem.status == 422 and problem.errors and problem.errors[0]["field"] == "body.cluster":
                raise invalid_field(field, problem.errors[0]["reason"], problem.suggestions) from None
            raise
        sizes[name] = None if name in _node_names() and find_entry(session, "clusters", name) is None else resolved.cluster.num_gpus
    tasks = []
    for point in grid:
        size = sizes[point.cluster]
        if size is not None and point.num_gpus > size:
            tasks.append(_Task(point, None, f"the cluster {point.cluster!r} has {size} GPUs; name its node type to size it to the point"))
            continue
        price = prices[point.cluster]
        request = PlanRequest(
            model=body.model,
            cluster=point.cluster,
            num_gpus=point.num_gpus,
            training=Training.model_validate({**training, "global_batch_size": point.global_batch_size}),
            objective=body.objective,
            constraints=type(body.constraints).model_validate(constraints),
            top_k=body.top_k,
            gpu_hour_price_usd=price.gpu_hour_price_usd if price.pass_to_plan else None,
            deadline_s=None,
            time_budget_s=body.time_budget_s,
            profile_id=None,
        )
        tasks.append(_Task(point, request, None))
    return tasks


def _plan_all(
    tasks: list[_Task],
    session_factory: SessionFactory,
    pool: SolverPool | InlineSolver,
    metrics: Metrics,
    settings: Settings,
    versions: Versions,
    flights: SingleFlight | None,
    access: Access = ANYONE,
) -> list[Plan | None]:
    """Each plannable point's plan, committed as it is found, as many at once as the pool has
    solver processes. A point's error (422, 503) is the sweep's: the plans already found stay
    stored and are reused when the sweep is asked again."""

    def plan(task: _Task) -> Plan | None:
        if task.plan_request is None:
            return None
        session = session_factory()
        try:
            outcome = plans_service.create_plan(session, pool, metrics, settings, versions, task.plan_request, flights, access)
            try:
                session.commit()
            finally:
                outcome.release()
            return outcome.document
        finally:
            session.close()

    workers = max(1, min(getattr(pool, "workers", 1), len(tasks)))
    if workers == 1:
        return [plan(task) for task in tasks]
    executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="partitura-sweep")
    try:
        futures = [executor.submit(plan, task) for task in tasks]
        return [future.result() for future in futures]
    finally:
        # After an error the points not yet started are dropped, not planned for nothing.
        executor.shutdown(wait=True, cancel_futures=True)


def _point_result(task: _Task, plan: Plan | None, price: _Price) -> PointResult:
    point = task.point
    best = plan.best if plan is not None else None
    return PointResult.planned(
        point.cluster, point.num_gpus, point.global_batch_size, best.prediction if best else None, price.gpu_hour_price_usd
    )


def _efficiency(analysis: SweepAnalysis, result: PointResult) -> float | None:
    for series in analysis.series:
        if (series.cluster, series.global_batch_size) == (result.cluster, result.global_batch_size):
            for point in series.points:
                if point.num_gpus == result.num_gpus:
                    return point.efficiency
    return None


def _point_document(index: int, task: _Task, plan: Plan | None, result: PointResult, analysis: SweepAnalysis) -> dict[str, Any]:
    note = task.note
    if plan is not None and plan.best is None and plan.explanation is not None:
        note = plan.explanation.summary
    return {
        "index": index,
        "cluster": result.cluster,
        "num_gpus": result.num_gpus,
        "global_batch_size": result.global_batch_size,
        "status": "succeeded" if result.feasible else "infeasible",
        "plan_id": plan.id if plan is not None else None,
        "parallel": plan.best.parallel.model_dump(mode="json") if plan is not None and plan.best is not None else None,
        "step_time_s": result.step_time_s,
        "tokens_per_s": result.tokens_per_s,
        "mfu": result.mfu,
        "time_to_train_s": result.time_to_train_s,
        "gpu_hour_price_usd": result.gpu_hour_price_usd if result.feasible else None,
        "cost_usd": result.cost_usd,
        "scaling_efficiency": _efficiency(analysis, result),
        "on_pareto_front": index in analysis.pareto,
        "note": note,
    }


def _analysis_document(analysis: SweepAnalysis, prices: dict[str, _Price]) -> dict[str, Any]:
    return {
        "fitted_quantity": analysis.fitted_quantity,
        "efficiency_threshold": analysis.efficiency_threshold,
        "pareto_front": list(analysis.pareto),
        "series": [
            {
                "cluster": s.cluster,
                "global_batch_size": s.global_batch_size,
                "num_gpus": [p.num_gpus for p in s.points],
                "time_s": [p.time_s for p in s.points],
                "scaling_efficiency": [p.efficiency for p in s.points],
                "fit": None if s.fit is None else {
                    "a_s": s.fit.a_s, "b": s.fit.b, "r_squared": s.fit.r_squared, "num_points": s.fit.num_points,
                },
                "knee_num_gpus": s.knee_num_gpus,
            }
            for s in analysis.series
        ],
        "prices": [{"cluster": name, "gpu_hour_price_usd": p.gpu_hour_price_usd, "source": p.source} for name, p in prices.items()],
    }


def sweep_document(sweep: Sweep) -> schemas.Sweep:
    """The stored sweep as the API answers it (the points' plan links from their rows)."""
    points = [{**row.document, "plan_id": row.plan_id} for row in sorted(sweep.points, key=lambda r: r.position)]
    base = f"/v1/sweeps/{sweep.id}/charts"
    return schemas.Sweep.model_validate(
        {
            "id": sweep.id,
            "created_at": sweep.created_at,
            "request": sweep.request,
            "points": points,
            **sweep.analysis,
            "charts": {"scaling_svg": f"{base}/scaling.svg", "pareto_svg": f"{base}/pareto.svg"},
        }
    )


@dataclass(frozen=True)
class Prepared:
    """A sweep's points, each with its plan request (None: not plannable), and its prices."""

    tasks: list[_Task]
    prices: dict[str, _Price]

    def plan_requests(self) -> list[PlanRequest | None]:
        return [task.plan_request for task in self.tasks]


def prepare(session: Session, body: schemas.SweepRequest) -> Prepared:
    """Expand the grid, price the clusters and build every point's plan request (a 422 naming
    the field for anything malformed or unknown). Reads the catalog in ``session``."""
    grid = _grid(body)
    prices = _prices(session, body, _clusters(body))
    return Prepared(_tasks(session, body, grid, prices), prices)


def store_sweep(
    session: Session, body: schemas.SweepRequest, prepared: Prepared, plans: list[Plan | None], access: Access = ANYONE
) -> schemas.Sweep:
    """Analyse the points' plans (one per task, None where not planned) and store the sweep,
    flushed in ``session`` for the caller to commit (app.jobs assembles a job's sweep here too)."""
    tasks, prices = prepared.tasks, prepared.prices
    results = [_point_result(task, plan, prices[task.point.cluster]) for task, plan in zip(tasks, plans)]
    analysis = analyse(results, body.efficiency_threshold)
    model_name = body.model if isinstance(body.model, str) else body.model.name
    sweep = Sweep(
        id=str(uuid.uuid4()),
        created_at=utc_now(),
        model_name=model_name,
        num_points=len(tasks),
        request=body.model_dump(mode="json", exclude_none=True),
        analysis=_analysis_document(analysis, prices),
        owner_token_id=access.owner,
    )
    for index, (task, plan, result) in enumerate(zip(tasks, plans, results)):
        sweep.points.append(
            SweepPoint(
                position=index,
                plan_id=plan.id if plan is not None else None,
                status="succeeded" if result.feasible else "infeasible",
                cluster_name=task.point.cluster,
                num_gpus=task.point.num_gpus,
                global_batch_size=task.point.global_batch_size,
                document=_point_document(index, task, plan, result, analysis),
            )
        )
    repository.add(session, sweep)
    return sweep_document(sweep)


def create_sweep(
    session: Session,
    session_factory: SessionFactory,
    pool: SolverPool | InlineSolver,
    metrics: Metrics,
    settings: Settings,
    versions: Versions,
    body: schemas.SweepRequest,
    flights: SingleFlight | None = None,
    access: Access = ANYONE,
) -> schemas.Sweep:
    """Plan every point and store the sweep (flushed in ``session``, for the caller to commit).
    Each point's plan is committed by its own session as it is found. The sweep and its plans
    are owned by ``access.owner``."""
    prepared = prepare(session, body)
    session.rollback()  # no transaction is held while the points are planned
    plans = _plan_all(prepared.tasks, session_factory, pool, metrics, settings, versions, flights, access)
    return store_sweep(session, body, prepared, plans, access)


def _stored(session: Session, sweep_id: str, access: Access) -> Sweep:
    sweep = repository.get(session, sweep_id, access)
    if sweep is None:
        raise not_found("sweep", sweep_id)  # opaque ids: no suggestions
    return sweep


def get_sweep(session: Session, sweep_id: str, access: Access = ANYONE) -> schemas.Sweep:
    return sweep_document(_stored(session, sweep_id, access))


def analysis_of(document: schemas.Sweep) -> tuple[SweepAnalysis, list[PointResult]]:
    """The analysis of a sweep's points, recomputed from its stored figures (what the charts
    draw; the same as the stored analysis), and those points."""
    results = [
        PointResult(
            cluster=p.cluster,
            num_gpus=p.num_gpus,
            global_batch_size=p.global_batch_size,
            feasible=p.status == "succeeded",
            step_time_s=p.step_time_s,
            tokens_per_s=p.tokens_per_s,
            mfu=p.mfu,
            time_to_train_s=p.time_to_train_s,
            gpu_hour_price_usd=p.gpu_hour_price_usd,
        )
        for p in document.points
    ]
    return analyse(results, document.efficiency_threshold), results


def model_name(document: schemas.Sweep) -> str:
    model = document.request.model
    return model if isinstance(model, str) else model.name


def scaling_svg(session: Session, sweep_id: str, access: Access = ANYONE) -> str:
    document = get_sweep(session, sweep_id, access)
    return scaling_chart(analysis_of(document)[0], model_name(document))


def pareto_svg(session: Session, sweep_id: str, access: Access = ANYONE) -> str:
    document = get_sweep(session, sweep_id, access)
    return pareto_chart(analysis_of(document)[1], document.pareto_front, model_name(document))
