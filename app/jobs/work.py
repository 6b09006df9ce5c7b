"""What a worker does: run one point of a job, and assemble the job's result once every point
is done. The same functions run in a procrastinate worker (Postgres) and in the API process
(SQLite, app.jobs.runner.EmbeddedRunner).

Every step is safe to repeat. A point starts only while its job is open and the point is not
done; it completes by a conditional update (``status <> 'succeeded'``), so a point retried after
its worker died completes once; its plan is stored under the plan request's hash, so a retry
finds the plan a dead worker already stored instead of searching again. The result is built by
whoever completes the last point, under a lock on the job row, once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.core.db import utc_now
from app.core.metrics import Metrics
from app.core.ownership import Access
from app.core.problems import Problem
from app.core.single_flight import SingleFlight
from app.core.solver_pool import InlineSolver, SolverPool
from app.core.versions import Versions
from app.jobs.models import OPEN_STATUSES, Job, JobPoint
from app.plans import service as plans_service
from app.plans.schemas import Plan, PlanRequest
from app.sweeps import service as sweeps_service
from app.sweeps.schemas import SweepRequest

logger = logging.getLogger(__name__)

SessionFactory = Callable[[], Session]

# Starts of one point before its job fails: a point whose worker keeps dying, or whose search
# keeps being lost, must not be retried forever.
MAX_POINT_ATTEMPTS = 5
# Seconds before a point whose database did not answer is tried again.
DATABASE_RETRY_S = 5.0


class RetryablePoint(Exception):
    """The point could not run now (the solver pool is saturated, a search was lost); run it
    again later. ``retry_after_s``: how long to wait."""

    def __init__(self, detail: str, retry_after_s: float) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class Runtime:
    """What running a point needs: the database and the solver, as the API has them."""

    session_factory: SessionFactory
    pool: SolverPool | InlineSolver
    metrics: Metrics
    settings: Settings
    versions: Versions
    flights: SingleFlight | None


def access_of(owner: str | None) -> Access:
    """The job owner's access: a job of a token sees and owns what that token does."""
    return Access(owner=owner, sees_all=owner is None)


def run_point(runtime: Runtime, job_id: str, position: int) -> bool:
    """Run point ``position`` of job ``job_id`` and, if it was the last, assemble the job's
    result. False: nothing to do (the job is closed or gone, or the point already done).
    Raises ``RetryablePoint`` to be run again; any other failure fails the job."""
    session = runtime.session_factory()
    try:
        job = session.get(Job, job_id)
        point = session.scalars(select(JobPoint).where(JobPoint.job_id == job_id, JobPoint.position == position)).one_or_none()
        if job is None or point is None or job.status not in OPEN_STATUSES:
            return False
        if point.status == "succeeded" or point.request is None:
            session.rollback()
            finish_job(runtime.session_factory, job_id)
            return False
        if point.attempts >= MAX_POINT_ATTEMPTS:
            session.rollback()
            detail = f"point {position} was started {point.attempts} times without completing"
            fail_job(runtime.session_factory, job_id, Problem(500, "Job failed", detail, slug="job-failed").to_dict())
            return False
        owner = job.owner_token_id
        now = utc_now()
        session.execute(update(Job).where(Job.id == job_id, Job.status == "queued").values(status="running", started_at=now))
        point.status, point.attempts = "running", point.attempts + 1
        request = PlanRequest.model_validate(point.request)
        session.commit()
        try:
            outcome = plans_service.create_plan(
                session, runtime.pool, runtime.metrics, runtime.settings, runtime.versions, request, runtime.flights,
                access_of(owner),
            )
            try:
                session.commit()
            finally:
                outcome.release()
        except Problem as problem:
            session.rollback()
            if problem.status == 503:
                # Not an attempt: the point never reached a solver (or lost it); back in line.
                session.execute(
                    update(JobPoint).where(JobPoint.job_id == job_id, JobPoint.position == position, JobPoint.status == "running")
                    .values(status="queued", attempts=JobPoint.attempts - 1)
                )
                session.commit()
                raise RetryablePoint(problem.detail, float(problem.headers.get("Retry-After", "5"))) from None
            fail_job(runtime.session_factory, job_id, problem.to_dict())
            return False
        completed = session.execute(
            update(JobPoint)
            .where(JobPoint.job_id == job_id, JobPoint.position == position, JobPoint.status != "succeeded")
            .values(status="succeeded", plan_id=outcome.document.id, completed_at=utc_now())
        )
        session.commit()
        if completed.rowcount != 1:  # type: ignore[attr-defined]
            logger.info("job %s point %s: already completed by another attempt", job_id, position)
    finally:
        session.close()
    finish_job(runtime.session_factory, job_id)
    return True


def run_point_or_fail(runtime: Runtime, job_id: str, position: int) -> bool:
    """``run_point``; a database that did not answer makes it retryable, any other unexpected
    error fails the job (a problem document naming it) and is raised again for the worker's log."""
    try:
        return run_point(runtime, job_id, position)
    except RetryablePoint:
        raise
    except OperationalError as error:  # the database was away for a moment: nothing was lost
        raise RetryablePoint(f"point {position}: database error {type(error).__name__}", DATABASE_RETRY_S) from error
    except Exception as error:
        detail = f"point {position} failed: {type(error).__name__}"
        fail_job(runtime.session_factory, job_id, Problem(500, "Job failed", detail, slug="job-failed").to_dict())
        raise


def fail_job(session_factory: SessionFactory, job_id: str, problem: dict) -> None:
    """Close an open job as failed with ``problem``; its points not started are cancelled."""
    with session_factory() as session:
        closed = session.execute(
            update(Job).where(Job.id == job_id, Job.status.in_(OPEN_STATUSES))
            .values(status="failed", error=problem, finished_at=utc_now())
        )
        if closed.rowcount:  # type: ignore[attr-defined]
            session.execute(update(JobPoint).where(JobPoint.job_id == job_id, JobPoint.status == "queued").values(status="cancelled"))
        session.commit()


def pending_positions(session: Session, job_id: str) -> list[int]:
    """The points of ``job_id`` still to run (queued, or running on a worker that may be gone)."""
    query = select(JobPoint.position).where(JobPoint.job_id == job_id, JobPoint.status.in_(("queued", "running")))
    return list(session.scalars(query.order_by(JobPoint.position)))


def finish_job(session_factory: SessionFactory, job_id: str) -> bool:
    """If every point of the open job ``job_id`` is done, store its result (the sweep, or the
    plan's link) and close it as succeeded; True if this call did. The job row is locked (FOR
    UPDATE on Postgres; SQLite's transactions take the write lock at BEGIN), so two workers
    finishing the last two points build one result."""
    with session_factory() as session:
        job = session.scalars(select(Job).where(Job.id == job_id).with_for_update()).one_or_none()
        if job is None or job.status not in OPEN_STATUSES:
            return False
        remaining = session.scalar(
            select(func.count()).select_from(JobPoint)
            .where(JobPoint.job_id == job_id, JobPoint.status != "succeeded", JobPoint.request.is_not(None))
        )
        if remaining:
            return False
        points = list(session.scalars(select(JobPoint).where(JobPoint.job_id == job_id).order_by(JobPoint.position)))
        access = access_of(job.owner_token_id)
        try:
            result_id = _assemble(session, job, points, access)
        except Problem as problem:
            session.rollback()
            fail_job(session_factory, job_id, problem.to_dict())
            return False
        job.status, job.result_id, job.finished_at = "succeeded", result_id, utc_now()
        session.commit()
        return True


def _assemble(session: Session, job: Job, points: list[JobPoint], access: Access) -> str:
    """The id of the job's result: a plan job's plan; a sweep job's sweep, stored here."""
    if job.kind == "plan":
        plan_id = points[0].plan_id
        if plan_id is None:
            raise Problem(410, "Result gone", "the job's plan was deleted before the job finished", slug="job-result-gone")
        return plan_id
    body = SweepRequest.model_validate(job.request)
    prepared = sweeps_service.prepare(session, body)
    plans: list[Plan | None] = [
        plans_service.get_plan(session, point.plan_id, access) if point.plan_id is not None else None for point in points
    ]
    return sweeps_service.store_sweep(session, body, prepared, plans, access).id
