"""Queries on custom catalog entries (built-ins live in the ``catalog`` package, read-only)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.catalog.models import CustomCluster, CustomModel

CustomEntry = CustomModel | CustomCluster
CustomTable = type[CustomModel] | type[CustomCluster]


def get(session: Session, table: CustomTable, name: str) -> CustomEntry | None:
    return session.scalars(select(table).where(table.name == name)).one_or_none()


def list_all(session: Session, table: CustomTable) -> list[CustomEntry]:
    return list(session.scalars(select(table).order_by(table.name)))


def names(session: Session, table: CustomTable) -> list[str]:
    return list(session.scalars(select(table.name).order_by(table.name)))


def add(
    session: Session, table: CustomTable, name: str, spec: dict[str, Any], created_at: datetime, owner: str | None = None
) -> CustomEntry:
    """Insert and flush: a duplicate name raises ``IntegrityError`` here, not at commit."""
    row = table(name=name, spec=spec, created_at=created_at, owner_token_id=owner)
    session.add(row)
    session.flush()
    return row


def delete(session: Session, row: CustomEntry) -> None:
    session.delete(row)
    session.flush()
