"""Jobs as the API sees them: create one (its points stored, then handed to the runner), read
it, cancel it. The request is checked before the job exists: a malformed sweep is a 422 now,
not a failed job later."""

from __future__ import annotations

import uuid
from typing import Protocol

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app.core.db import utc_now
from app.core.ownership import ANYONE, Access
from app.core.problems import Problem, not_found
from app.jobs import schemas
from app.jobs.models import OPEN_STATUSES, Job, JobPoint
from app.plans.schemas import PlanRequest
from app.sweeps import service as sweeps_service
from app.sweeps.schemas import SweepRequest


class Runner(Protocol):
    """Runs a job's points somewhere: in this process (SQLite) or on the queue's workers."""

    def submit(self, job_id: str, positions: list[int]) -> None: ...

    def finish(self, job_id: str) -> None: ...


def _create(session: Session, kind: str, request: dict, points: list[tuple[PlanRequest | None, str | None]], access: Access) -> Job:
    job = Job(
        id=str(uuid.uuid4()), kind=kind, status="queued", created_at=utc_now(), request=request,
        points_total=len(points), owner_token_id=access.owner,
    )
    session.add(job)
    session.flush()
    for position, (plan_request, note) in enumerate(points):
        session.add(
            JobPoint(
                job_id=job.id, position=position, attempts=0, note=note,
                status="queued" if plan_request is not None else "succeeded",
                request=plan_request.model_dump(mode="json") if plan_request is not None else None,
            )
        )
    session.flush()
    return job


def _start(session: Session, runner: Runner, job: Job) -> schemas.Job:
    """Commit the job, then hand its points to the runner (a job with nothing to plan is
    finished at once)."""
    session.commit()
    positions = [p for p in session.scalars(
        select(JobPoint.position).where(JobPoint.job_id == job.id, JobPoint.status == "queued").order_by(JobPoint.position)
    )]
    session.rollback()
    if positions:
        runner.submit(job.id, positions)
    else:
        runner.finish(job.id)
    return get_job(session, job.id)


def submit_sweep(session: Session, runner: Runner, body: SweepRequest, access: Access = ANYONE) -> schemas.Job:
    """A sweep as a job: every point's plan request is built (and checked) now, stored as a
    point, and run by the runner; the sweep is stored when the last point is done."""
    prepared = sweeps_service.prepare(session, body)
    points = [(task.plan_request, task.note) for task in prepared.tasks]
    job = _create(session, "sweep", body.model_dump(mode="json", exclude_none=True), points, access)
    return _start(session, runner, job)


def submit_plan(session: Session, runner: Runner, body: PlanRequest, access: Access = ANYONE) -> schemas.Job:
    """A plan request as a job of one point."""
    job = _create(session, "plan", body.model_dump(mode="json", exclude_none=True), [(body, None)], access)
    return _start(session, runner, job)


def _stored(session: Session, job_id: str, access: Access) -> Job:
    job = session.scalars(access.visible(select(Job).where(Job.id == job_id), Job.owner_token_id)).one_or_none()
    if job is None:
        raise not_found("job", job_id, [])
    return job


def job_document(session: Session, job: Job) -> schemas.Job:
    done = session.scalar(
        select(func.count()).select_from(JobPoint).where(JobPoint.job_id == job.id, JobPoint.status == "succeeded")
    )
    result = None
    if job.status == "succeeded" and job.result_id is not None:
        result = schemas.JobResult(kind=job.kind, id=job.result_id, href=f"/v1/{job.kind}s/{job.result_id}")  # type: ignore[arg-type]
    return schemas.Job(
        id=job.id, kind=job.kind, status=job.status, points_done=done or 0, points_total=job.points_total,  # type: ignore[arg-type]
        created_at=job.created_at, started_at=job.started_at, finished_at=job.finished_at, result=result,
        error=None if job.error is None else schemas.JobProblem.model_validate(
            {key: job.error[key] for key in ("type", "title", "status", "detail", "errors") if key in job.error}
        ),
        href=f"/v1/jobs/{job.id}",
    )


def get_job(session: Session, job_id: str, access: Access = ANYONE) -> schemas.Job:
    return job_document(session, _stored(session, job_id, access))


def cancel_job(session: Session, job_id: str, access: Access = ANYONE) -> schemas.Job:
    """Cancel an open job: its points not yet started never start, and a point running now is
    not waited for (its plan is stored, the job stays cancelled). Cancelling a cancelled job
    answers it again; a finished one is a 409. Leaves the change for the caller to commit."""
    job = _stored(session, job_id, access)
    if job.status in OPEN_STATUSES:
        closed = session.execute(
            update(Job).where(Job.id == job_id, Job.status.in_(OPEN_STATUSES)).values(status="cancelled", finished_at=utc_now())
        )
        if closed.rowcount:  # type: ignore[attr-defined]
            session.execute(
                update(JobPoint).where(JobPoint.job_id == job_id, JobPoint.status.in_(("queued", "running"))).values(status="cancelled")
            )
        session.flush()
        session.refresh(job)
    if job.status != "cancelled":
        raise Problem(409, "Job finished", f"the job {job_id} has {job.status}; only a queued or running job can be cancelled",
                      slug="job-finished")
    return job_document(session, job)
