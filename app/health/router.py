"""Liveness, readiness and metrics."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from app.core.deps import MetricsDep, SessionDep
from app.core.metrics import CONTENT_TYPE_LATEST
from app.core.migrate import current_revision
from app.core.openapi import ProblemDocument
from app.core.problems import Problem
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
def readyz(request: Request, session: SessionDep) -> Readiness:
    """The database answers and its schema is at the migrations' head."""
    head = request.app.state.migration_head
    try:
        session.execute(text("SELECT 1"))
        session.rollback()
        current = current_revision(request.app.state.engine)
    except SQLAlchemyError as error:
        raise Problem(503, "Not ready", f"database unreachable: {type(error).__name__}", slug="not-ready") from None
    if current != head:
        raise Problem(
            503, "Not ready", f"database schema at revision {current}, migrations head is {head}; run `partitura db upgrade`",
            slug="not-ready",
        )
    return Readiness(status="ready", database_revision=current)


METRICS_RESPONSES: dict[int | str, dict] = {
    200: {
        "description": "Prometheus text exposition format",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    }
}


@router.get("/metrics", operation_id="get_metrics", response_class=Response, responses=METRICS_RESPONSES)
def metrics(session: SessionDep, metrics: MetricsDep) -> Response:
    """Prometheus text exposition: request latency, solve time, plans by status."""
    try:
        counts = count_by_status(session)
    except SQLAlchemyError:
        # Unknown, not zero: the gauge is left out rather than made to lie.
        metrics.database_up.set(0)
        metrics.plans_stored.clear()
    else:
        metrics.database_up.set(1)
        for plan_status in PLAN_STATUSES:
            metrics.plans_stored.labels(status=plan_status).set(counts.get(plan_status, 0))
    return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)
