"""API tokens: create (the token is returned once, its SHA-256 stored), list, revoke, and find
the token a request carries; the per-token plan request window (docs/auth.md)."""

from __future__ import annotations

import hashlib
import math
import secrets
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from app.core.db import utc_now
from app.core.problems import Problem
from app.tokens import repository, schemas
from app.tokens.models import ApiToken
from app.tokens.scopes import Scope, decode_scopes, encode_scopes

TOKEN_PREFIX = "ptk_"
# 32 random bytes: 256 bits, so a SHA-256 without salt or stretching is a safe hash at rest
# (nothing to guess from; salts and slow hashes are for low-entropy passwords).
TOKEN_BYTES = 32
# Characters of the token kept in the clear for listings: the prefix and 8 more (48 random bits).
SHOWN_CHARS = len(TOKEN_PREFIX) + 8
# last_used_at is written at most this often per token.
TOUCH_INTERVAL = timedelta(minutes=1)
# The quota's fixed window.
RATE_WINDOW_S = 60


def token_hash(token: str) -> str:
    """The SHA-256 (hex) of a token: what is stored and looked up."""
    return hashlib.sha256(token.encode()).hexdigest()


def _document(row: ApiToken) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "token_prefix": row.token_prefix,
        "scopes": [scope.value for scope in sorted(decode_scopes(row.scopes), key=list(Scope).index)],
        "created_at": row.created_at,
        "last_used_at": row.last_used_at,
        "revoked_at": row.revoked_at,
        "plans_per_minute": row.plans_per_minute,
    }


def create_token(
    session: Session, name: str, scopes: Iterable[Scope], plans_per_minute: int | None = None
) -> schemas.TokenCreated:
    """A new token (flushed, for the caller to commit). The answer is the only place the token
    appears; the row holds its hash."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)
    row = ApiToken(
        id=str(uuid.uuid4()),
        name=name,
        token_hash=token_hash(token),
        token_prefix=token[:SHOWN_CHARS],
        scopes=encode_scopes(scopes),
        created_at=utc_now(),
        plans_per_minute=plans_per_minute,
        rate_window_start_s=0,
        rate_window_requests=0,
    )
    repository.add(session, row)
    return schemas.TokenCreated.model_validate({**_document(row), "token": token})


def list_tokens(session: Session) -> schemas.TokenList:
    return schemas.TokenList.model_validate({"items": [_document(row) for row in repository.all_newest_first(session)]})


def _stored(session: Session, token_id: str) -> ApiToken:
    row = repository.get(session, token_id)
    if row is None:
        # Opaque ids: no suggestions.
        raise Problem(404, "Unknown token", f"no token with id {token_id[:64]!r}", slug="not-found")
    return row


def get_token(session: Session, token_id: str) -> schemas.Token:
    return schemas.Token.model_validate(_document(_stored(session, token_id)))


def revoke_token(session: Session, token_id: str) -> schemas.Token:
    """Revoke a token: from now on it is answered 401. Revoking it again keeps the first time."""
    row = _stored(session, token_id)
    if row.revoked_at is None:
        row.revoked_at = utc_now()
        session.flush()
    return schemas.Token.model_validate(_document(row))


@dataclass(frozen=True)
class Caller:
    """The token a request carries, as the service needs it after authentication."""

    token_id: str
    name: str
    scopes: frozenset[Scope]
    plans_per_minute: int | None


def authenticate(session: Session, token: str, now: datetime) -> Caller | None:
    """The unrevoked token ``token``, its use recorded (last_used_at); None if there is none."""
    row = repository.active_by_hash(session, token_hash(token))
    if row is None:
        return None
    repository.touch(session, row.id, now, now - TOUCH_INTERVAL)
    return Caller(row.id, row.name, decode_scopes(row.scopes), row.plans_per_minute)


@dataclass(frozen=True)
class WindowCount:
    requests: int  # this token's requests in the current window, this one included
    retry_after_s: int  # whole seconds until the window ends


def count_plan_request(session: Session, token_id: str, now: datetime) -> WindowCount:
    """Count a plan request in the token's current one-minute window (fixed windows aligned to
    the minute, counted in the database so that every worker and replica shares them)."""
    now_s = now.timestamp()
    window_start_s = int(now_s // RATE_WINDOW_S) * RATE_WINDOW_S
    requests = repository.count_in_window(session, token_id, window_start_s, now)
    return WindowCount(requests, max(1, math.ceil(window_start_s + RATE_WINDOW_S - now_s)))
