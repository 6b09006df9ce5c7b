"""Liveness, readiness and metrics."""

from __future__ import annotations

from typing import Literal

from alembic.runtime.migration import MigrationContext
from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from app.core.metrics import CONTENT_TYPE_LATEST, Metrics
from app.core.openapi import ProblemDocument
from app.core.problems import Problem
from app.health.probe import DatabaseProbe, ProbeTimeout
from app.plans.models import PLAN_STATUSES
from app.plans.repository import count_by_status

router = APIRouter(tags=["operations"])


class Liveness(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["ok"]


class Readiness(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["ready"]
    database_revision: str


@router.get("/healthz", operation_id="check_liveness")
async def healthz() -> Liveness:
    """The process answers (no dependency is checked). Runs on the event loop, never in the
    thread pool that database work may fill, so it answers while the database hangs."""
    return Liveness(status="ok")


@router.get(
    "/readyz",
    operation_id="check_readiness",
    responses={503: {"model": ProblemDocument, "description": "Database unreachable or not migrated"}},
)
async def readyz(request: Request) -> Readiness:
    """The database answers within the database timeout (PARTITURA_DATABASE_TIMEOUT_S) and its
    schema is at the migrations' head."""
    # A fresh connection in a thread of its own (app.health.probe): it answers in time while the
    # database, its pooled connections or the request thread pool hang.
    probe: DatabaseProbe = request.app.state.database_probe
    head = request.app.state.migration_head
    try:
        current = await probe.run(_revision)
    except (ProbeTimeout, SQLAlchemyError) as error:
        reason = str(error) if isinstance(error, ProbeTimeout) else type(error).__name__
        raise Problem(503, "Not ready", f"database unreachable: {reason}", slug="not-ready") from None
    if current != head:
        raise Problem(
            503, "Not ready", f"database schema at revision {current}, migrations head is {head}; run `partitura db upgrade`",
            slug="not-ready",
        )
    return Readiness(status="ready", database_revision=current)


def _revision(session: Session) -> str | None:
    return MigrationContext.configure(session.connection()).get_current_revision()


METRICS_RESPONSES: dict[int | str, dict] = {
    200: {
        "description": "Prometheus text exposition format",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    }
}


@router.get("/metrics", operation_id="get_metrics", response_class=Response, responses=METRICS_RESPONSES)
async def metrics(request: Request) -> Response:
    """Prometheus text exposition: request latency, solve time, plans by status, database errors.
    When the database does not answer within the database timeout, `partitura_database_up` is 0
    and the plan counts are left out (unknown, not zero)."""
    # The counts come from a probe on a fresh connection in a thread of its own (app.health.probe).
    metrics: Metrics = request.app.state.metrics
    probe: DatabaseProbe = request.app.state.database_probe
    try:
        counts = await probe.run(count_by_status)
    except (ProbeTimeout, SQLAlchemyError):
        # Unknown, not zero: the gauge is left out rather than made to lie.
        metrics.database_up.set(0)
        metrics.plans_stored.clear()
    else:
        metrics.database_up.set(1)
        for plan_status in PLAN_STATUSES:
            metrics.plans_stored.labels(status=plan_status).set(counts.get(plan_status, 0))
    return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)
