"""Queries on profiles."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

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
    if after is not None:
        created_at, profile_id = after
        query = query.where(
            or_(Profile.created_at < created_at, and_(Profile.created_at == created_at, Profile.id < profile_id))
        )
    return list(session.scalars(query.order_by(Profile.created_at.desc(), Profile.id.desc()).limit(limit)))


def ids_starting_with(session: Session, prefix: str) -> list[str]:
    """Up to three profile ids sharing ``prefix`` (suggestions for a mistyped id)."""
    if not prefix:
        return []
    query = select(Profile.id).where(Profile.id.startswith(prefix, autoescape=True)).order_by(Profile.id)
    return list(session.scalars(query.limit(SUGGESTIONS)))
