"""Queries on profiles."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.ownership import ANYONE, Access
from app.core.pagination import newest_first_after
from app.profiles.models import Profile


def get(session: Session, profile_id: str, access: Access = ANYONE) -> Profile | None:
    """The profile ``profile_id`` if ``access`` may see it (another owner's is None, as an unknown one)."""
    row = session.get(Profile, profile_id)
    return row if row is not None and access.can_see(row.owner_token_id) else None


def add(session: Session, profile: Profile) -> None:
    session.add(profile)
    session.flush()


def delete(session: Session, profile: Profile) -> None:
    session.delete(profile)
    session.flush()


def page(
    session: Session, limit: int, after: tuple[datetime, str] | None, model: str | None = None, access: Access = ANYONE
) -> list[Profile]:
    """Up to ``limit`` profiles ``access`` may see, newest first (created_at, then id,
    descending), strictly after the cursor position ``after``."""
    query = access.visible(select(Profile), Profile.owner_token_id)
    if model is not None:
        query = query.where(Profile.model_name == model)
    return list(session.scalars(newest_first_after(query, Profile, after, limit)))

