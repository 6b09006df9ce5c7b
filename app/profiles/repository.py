"""Queries on profiles."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.pagination import newest_first_after
from app.profiles.models import Profile

SUGGESTIONS = 3


def get(session: Session, profile_id: str) -> Profile | None:
    return session.get(Profile, profile_id)


def add(session: Session, profile: Profile) -> None:
    session.add(profile)
    session.flush()


def delete(session: Session, profile: Profile) -> None:
    session.delete(profile)
    session.flush()


def page(session: Session, limit: int, after: tuple[datetime, str] | None, model: str | None = None) -> list[Profile]:
    """Up to ``limit`` profiles, newest first (created_at, then id, descending), strictly after
    the cursor position ``after``."""
    query = select(Profile)
    if model is not None:
        query = query.where(Profile.model_name == model)
    return list(session.scalars(newest_first_after(query, Profile, after, limit)))


def ids_starting_with(session: Session, prefix: str) -> list[str]:
    """Up to three profile ids sharing ``prefix`` (suggestions for a mistyped id)."""
    if not prefix:
        return []
    query = select(Profile.id).where(Profile.id.startswith(prefix, autoescape=True)).order_by(Profile.id)
    return list(session.scalars(query.limit(SUGGESTIONS)))
