"""Queries on plans."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session, selectinload

from app.core.ownership import ANYONE, Access
from app.core.pagination import newest_first_after
from app.plans.models import Plan, PlanCandidate


def get(session: Session, plan_id: str, access: Access = ANYONE) -> Plan | None:
    """The plan ``plan_id`` if ``access`` may see it (another owner's plan is None, as an unknown one)."""
    query = select(Plan).where(Plan.id == plan_id).options(selectinload(Plan.candidates))
    return session.scalars(access.visible(query, Plan.owner_token_id)).one_or_none()


def get_by_hash(session: Session, request_hash: str) -> Plan | None:
    return session.scalars(
        select(Plan).where(Plan.request_hash == request_hash).options(selectinload(Plan.candidates))
    ).one_or_none()


def add(session: Session, plan: Plan) -> None:
    """Insert the plan and its candidates and flush: a second plan with the same request hash
    raises ``IntegrityError`` here (the unique key decides, also between processes)."""
    session.add(plan)
    session.flush()


def delete(session: Session, plan: Plan) -> None:
    session.delete(plan)
    session.flush()


def page(
    session: Session,
    limit: int,
    after: tuple[datetime, str] | None,
    model: str | None = None,
    cluster: str | None = None,
    status: str | None = None,
    access: Access = ANYONE,
) -> list[Plan]:
    """Up to ``limit`` plans ``access`` may see, newest first (created_at, then id, descending),
    strictly after the cursor position ``after``."""
    query = access.visible(select(Plan), Plan.owner_token_id)
    if model is not None:
        query = query.where(Plan.model_name == model)
    if cluster is not None:
        query = query.where(Plan.cluster_name == cluster)
    if status is not None:
        query = query.where(Plan.status == status)
    return list(session.scalars(newest_first_after(query, Plan, after, limit)))


def best_candidates(session: Session, plan_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The top-ranked candidate's parallel config and throughput for each plan."""
    if not plan_ids:
        return {}
    top = (
        select(PlanCandidate.plan_id, func.min(PlanCandidate.rank).label("rank"))
        .where(PlanCandidate.plan_id.in_(plan_ids))
        .group_by(PlanCandidate.plan_id)
        .subquery()
    )
    rows = session.execute(
        select(PlanCandidate.plan_id, PlanCandidate.parallel, PlanCandidate.tokens_per_s).join(
            top, and_(PlanCandidate.plan_id == top.c.plan_id, PlanCandidate.rank == top.c.rank)
        )
    )
    return {row.plan_id: {"parallel": row.parallel, "tokens_per_s": row.tokens_per_s} for row in rows}


def count_by_status(session: Session) -> dict[str, int]:
    return {status: count for status, count in session.execute(select(Plan.status, func.count()).group_by(Plan.status))}
