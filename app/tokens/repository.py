"""Queries on API tokens."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import case, or_, select, update
from sqlalchemy.orm import Session

from app.tokens.models import ApiToken


def get(session: Session, token_id: str) -> ApiToken | None:
    return session.get(ApiToken, token_id)


def active_by_hash(session: Session, token_hash: str) -> ApiToken | None:
    """The unrevoked token whose SHA-256 is ``token_hash``."""
    return session.scalars(
        select(ApiToken).where(ApiToken.token_hash == token_hash, ApiToken.revoked_at.is_(None))
    ).one_or_none()


def add(session: Session, token: ApiToken) -> None:
    session.add(token)
    session.flush()


def all_newest_first(session: Session) -> list[ApiToken]:
    return list(session.scalars(select(ApiToken).order_by(ApiToken.created_at.desc(), ApiToken.id.desc())))


def touch(session: Session, token_id: str, now: datetime, not_since: datetime) -> None:
    """``last_used_at = now`` unless it was set after ``not_since`` (one write a minute, not one a request)."""
    session.execute(
        update(ApiToken)
        .where(ApiToken.id == token_id, or_(ApiToken.last_used_at.is_(None), ApiToken.last_used_at < not_since))
        .values(last_used_at=now)
    )


def count_in_window(session: Session, token_id: str, window_start_s: int, now: datetime) -> int:
    """Count one request in the window starting at ``window_start_s`` and return how many the
    token has made in it. One UPDATE: the row lock (Postgres) or the write lock (SQLite) makes
    concurrent requests count one after the other; a new window starts again from 1 (every SET
    expression reads the row as it was before the statement)."""
    return session.execute(
        update(ApiToken)
        .where(ApiToken.id == token_id)
        .values(
            rate_window_requests=case(
                (ApiToken.rate_window_start_s == window_start_s, ApiToken.rate_window_requests + 1), else_=1
            ),
            rate_window_start_s=window_start_s,
            last_used_at=now,
        )
        .returning(ApiToken.rate_window_requests)
    ).scalar_one()
