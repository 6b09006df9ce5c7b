"""Service settings, read once from the environment and passed explicitly from there on."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal, Mapping

# Seconds a Postgres connection may take to open, and a request may wait for a pooled one, before
# the request is answered 503: a database that accepts connections and never answers must not
# hang the API (libpq counts whole seconds and treats less than 2 as 2).
DEFAULT_DATABASE_TIMEOUT_S = 5.0
DEFAULT_DATABASE_URL = "sqlite:///./partitura.db"
# Large enough for a measured profile of a 1,024-layer model (about 300 bytes a layer) many times
# over; a plan or evaluation request is a few kilobytes.
DEFAULT_MAX_BODY_BYTES = 4 * 2**20
# Authentication (docs/auth.md): "off" for local use (nothing is owned, everyone reads all),
# "required" for a deployment (every /v1 request carries an API token).
AuthMode = Literal["off", "required"]
AUTH_MODES: tuple[AuthMode, ...] = ("off", "required")
# Per token, with authentication required: plan, sweep and sizing requests a minute (a fixed
# one-minute window counted in the database, so every worker and replica shares it), and
# searches running at once in one process. 0 turns a limit off.
DEFAULT_QUOTA_PLANS_PER_MINUTE = 30
DEFAULT_QUOTA_CONCURRENT_SOLVES = 2


def database_url_with_driver(url: str) -> str:
    """``postgres://`` and ``postgresql://`` URLs (as hosting platforms hand them out) use the
    installed psycopg 3 driver; every other URL is used as given."""
    for scheme in ("postgres://", "postgresql://"):
        if url.startswith(scheme):
            return "postgresql+psycopg://" + url[len(scheme) :]
    return url


class SettingsError(ValueError):
    """An environment variable holds a value the service cannot use."""


def _int_at_least(env: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise SettingsError(f"{name} must be at least {minimum}, got {value}")
    return value


def _positive_float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number, got {raw!r}") from None
    if not value > 0:
        raise SettingsError(f"{name} must be positive, got {value}")
    return value


def _auth_mode(env: Mapping[str, str]) -> AuthMode:
    raw = (env.get("PARTITURA_AUTH") or "off").strip().lower()
    for mode in AUTH_MODES:
        if raw == mode:
            return mode
    raise SettingsError(f"PARTITURA_AUTH must be one of {', '.join(AUTH_MODES)}, got {raw!r}")


@dataclass(frozen=True)
class Settings:
    """Everything the service reads from its environment (see README, Configuration).

    ``solver_workers`` processes run searches; at most ``solver_queue_depth`` more requests wait
    for one; past that a plan request is answered 503 with ``Retry-After: retry_after_s``.
    ``plan_time_budget_s`` caps the search time of one plan request.
    """

    database_url: str = DEFAULT_DATABASE_URL
    solver_workers: int = 2
    solver_queue_depth: int = 4
    plan_time_budget_s: float = 30.0
    retry_after_s: int = 5
    # A search that has not returned this long after its budget is abandoned (a safety net:
    # the solver honours the budget itself and returns the best plan found so far).
    solver_grace_s: float = 30.0
    # Larger request bodies are answered 413 (app.core.limits).
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # How long opening a database connection, or waiting for a pooled one, may take (app.core.db).
    database_timeout_s: float = DEFAULT_DATABASE_TIMEOUT_S
    # API tokens, ownership and quotas (app.core.auth, docs/auth.md).
    auth_mode: AuthMode = "off"
    quota_plans_per_minute: int = DEFAULT_QUOTA_PLANS_PER_MINUTE
    quota_concurrent_solves: int = DEFAULT_QUOTA_CONCURRENT_SOLVES

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> "Settings":
        env = os.environ if env is None else env
        return Settings(
            database_url=database_url_with_driver(env.get("DATABASE_URL") or DEFAULT_DATABASE_URL),
            solver_workers=_int_at_least(env, "PARTITURA_SOLVER_WORKERS", min(2, os.cpu_count() or 1), 1),
            solver_queue_depth=_int_at_least(env, "PARTITURA_SOLVER_QUEUE_DEPTH", 4, 0),
            plan_time_budget_s=_positive_float(env, "PARTITURA_PLAN_TIME_BUDGET_S", 30.0),
            retry_after_s=_int_at_least(env, "PARTITURA_RETRY_AFTER_S", 5, 1),
            solver_grace_s=_positive_float(env, "PARTITURA_SOLVER_GRACE_S", 30.0),
            max_body_bytes=_int_at_least(env, "PARTITURA_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES, 1024),
            database_timeout_s=_positive_float(env, "PARTITURA_DATABASE_TIMEOUT_S", DEFAULT_DATABASE_TIMEOUT_S),
            auth_mode=_auth_mode(env),
            quota_plans_per_minute=_int_at_least(env, "PARTITURA_QUOTA_PLANS_PER_MINUTE", DEFAULT_QUOTA_PLANS_PER_MINUTE, 0),
            quota_concurrent_solves=_int_at_least(env, "PARTITURA_QUOTA_CONCURRENT_SOLVES", DEFAULT_QUOTA_CONCURRENT_SOLVES, 0),
        )
