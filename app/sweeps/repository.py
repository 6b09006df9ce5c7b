"""Queries on sweeps."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from app.core.ownership import ANYONE, Access
from app.sweeps.models import Sweep


def get(session: Session, sweep_id: str, access: Access = ANYONE) -> Sweep | None:
    """The sweep ``sweep_id`` if ``access`` may see it (another owner's is None, as an unknown one)."""
    query = select(Sweep).where(Sweep.id == sweep_id).options(selectinload(Sweep.points))
    return session.scalars(access.visible(query, Sweep.owner_token_id)).one_or_none()


def add(session: Session, sweep: Sweep) -> None:
    """Insert the sweep and its points and flush."""
    session.add(sweep)
    session.flush()

