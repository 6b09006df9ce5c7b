"""Authentication, scopes and quotas for the routers (docs/auth.md).

With ``PARTITURA_AUTH=off`` (the default, for local use) every request is served as before:
nothing is owned and everything is visible (``ANYONE``). With ``PARTITURA_AUTH=required`` every
/v1 request carries ``Authorization: Bearer <token>``:

- no token, an unknown or a revoked one: 401 with ``WWW-Authenticate: Bearer``;
- a token without the scope the operation needs: 403;
- plan, sweep and sizing requests over the token's requests a minute: 429 with ``Retry-After``
  (the window is counted in the database, shared by every worker and replica);
- more of the token's searches at once than ``PARTITURA_QUOTA_CONCURRENT_SOLVES`` in this
  process: 429 with ``Retry-After``.

The operation then sees an ``Access``: the owner its new rows record and the rows it may read.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.core.db import utc_now
from app.core.ownership import ANYONE, Access
from app.core.problems import Problem
from app.tokens import service
from app.tokens.scopes import Scope, grants

BEARER_SCHEME = "bearer"
REALM = "partitura"

bearer = HTTPBearer(
    auto_error=False,
    scheme_name=BEARER_SCHEME,
    bearerFormat="ptk_<43 characters>",
    description="An API token (`partitura token create` or POST /v1/tokens), sent as `Authorization: Bearer <token>`."
    " Required when the service runs with PARTITURA_AUTH=required; ignored when authentication is off.",
)


def _unauthorized(detail: str, invalid: bool) -> Problem:
    challenge = f'Bearer realm="{REALM}"' + (', error="invalid_token"' if invalid else "")
    return Problem(401, "Unauthorized", detail, slug="unauthorized", headers={"WWW-Authenticate": challenge})


def _forbidden(needed: Scope) -> Problem:
    return Problem(
        403, "Forbidden", f"this operation needs a token with the {needed.value!r} scope (or a higher one)",
        slug="insufficient-scope",
        headers={"WWW-Authenticate": f'Bearer realm="{REALM}", error="insufficient_scope", scope="{needed.value}"'},
    )


def _too_many(detail: str, retry_after_s: int, slug: str) -> Problem:
    return Problem(429, "Too many requests", detail, slug=slug, headers={"Retry-After": str(retry_after_s)})


def authorize(needed: Scope, rate_limited: bool = False) -> Callable[..., Access]:
    """A dependency: the caller's ``Access`` if its token grants ``needed`` (and, for a
    ``rate_limited`` operation, the request is within the token's requests a minute)."""

    def dependency(
        request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]
    ) -> Access:
        settings = request.app.state.settings
        if settings.auth_mode == "off":
            return ANYONE
        if credentials is None:
            raise _unauthorized("this service requires an API token: send Authorization: Bearer <token>", invalid=False)
        # Its own short transaction, committed before the operation runs: the use and the
        # request count are recorded even if the operation fails, and no lock on the token's
        # row is held while it runs.
        session = request.app.state.sessionmaker()
        try:
            now = utc_now()
            caller = service.authenticate(session, credentials.credentials, now)
            if caller is None:
                session.commit()
                raise _unauthorized("the token is unknown or revoked", invalid=True)
            if not grants(caller.scopes, needed):
                session.commit()
                raise _forbidden(needed)
            limit = caller.plans_per_minute if caller.plans_per_minute is not None else settings.quota_plans_per_minute
            count = service.count_plan_request(session, caller.token_id, now) if rate_limited and limit > 0 else None
            session.commit()
        finally:
            session.close()
        if count is not None and count.requests > limit:
            raise _too_many(
                f"the token has made {limit} plan requests this minute, its quota; retry in {count.retry_after_s} s",
                count.retry_after_s, "rate-limited",
            )
        return Access(owner=caller.token_id, sees_all=grants(caller.scopes, Scope.ADMIN))

    return dependency


class SolveSlots:
    """Searches each token has running in this process (a per-process count: a slot held in the
    database would outlive a process killed while it searched)."""

    def __init__(self, per_token: int) -> None:
        self.per_token = per_token  # 0: no limit
        self._lock = threading.Lock()
        self._held: Counter[str] = Counter()

    def try_acquire(self, owner: str) -> bool:
        with self._lock:
            if self.per_token and self._held[owner] >= self.per_token:
                return False
            self._held[owner] += 1
            return True

    def release(self, owner: str) -> None:
        with self._lock:
            self._held[owner] -= 1
            if self._held[owner] <= 0:
                del self._held[owner]

    def held(self, owner: str) -> int:
        with self._lock:
            return self._held[owner]


_plan_scope = authorize(Scope.PLAN, rate_limited=True)


def solving(request: Request, access: Annotated[Access, Depends(_plan_scope)]) -> Iterator[Access]:
    """``authorize(Scope.PLAN, rate_limited=True)`` and one of the token's solve slots, held
    while the operation runs."""
    slots: SolveSlots = request.app.state.solve_slots
    if access.owner is None:
        yield access
        return
    if not slots.try_acquire(access.owner):
        retry_after_s = request.app.state.settings.retry_after_s
        raise _too_many(
            f"the token has {slots.per_token} searches running, its quota; retry in {retry_after_s} s",
            retry_after_s, "too-many-searches",
        )
    try:
        yield access
    finally:
        slots.release(access.owner)


ReadAccess = Annotated[Access, Depends(authorize(Scope.READ))]
WriteAccess = Annotated[Access, Depends(authorize(Scope.PLAN))]
# scope="function": the slot is given back when the operation returns, before the response is
# sent, so a client that sends its next request on the answer finds it free.
SolveAccess = Annotated[Access, Depends(solving, scope="function")]
AdminAccess = Annotated[Access, Depends(authorize(Scope.ADMIN))]
