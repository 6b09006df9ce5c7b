"""Queries on sweeps."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from app.sweeps.models import Sweep


def get(session: Session, sweep_id: str) -> Sweep | None:
    return session.scalars(select(Sweep).where(Sweep.id == sweep_id).options(selectinload(Sweep.points))).one_or_none()


def add(session: Session, sweep: Sweep) -> None:
    """Insert the sweep and its points and flush."""
    session.add(sweep)
    session.flush()


def ids_starting_with(session: Session, prefix: str, limit: int = 3) -> list[str]:
    if not prefix:
        return []
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return list(
        session.scalars(select(Sweep.id).where(Sweep.id.like(f"{escaped}%", escape="\\")).order_by(Sweep.id).limit(limit))
    )
