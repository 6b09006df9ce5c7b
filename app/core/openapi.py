"""OpenAPI pieces shared by routers: the problem document schema and the error responses."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class FieldError(BaseModel):
    field: str
    reason: str


class ProblemDocument(BaseModel):
    """RFC 9457 problem details."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    errors: list[FieldError] | None = None
    suggestions: list[str] | None = None


def _problem(description: str) -> dict[str, Any]:
    return {"description": description, "model": ProblemDocument}


PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    404: _problem("Unknown resource; suggests close names"),
    422: _problem("Invalid request; names each field and the reason"),
}

CONFLICT_RESPONSES: dict[int | str, dict[str, Any]] = {
    409: _problem("The name is taken by a built-in or an existing custom entry"),
}

RETRY_AFTER_HEADER = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}}

# Operations that start searches count against the token's quotas (app.tokens.auth).
QUOTA_RESPONSES: dict[int | str, dict[str, Any]] = {
    429: {
        **_problem("The token's plan requests this minute, or its searches running, are at its quota; retry after Retry-After seconds"),
        "headers": RETRY_AFTER_HEADER,
    },
}

# Every operation that declares the bearer scheme (app.main adds these to each).
AUTH_RESPONSES: dict[str, dict[str, Any]] = {
    "401": {
        "description": "No API token, or an unknown or revoked one (authentication required)",
        "headers": {"WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}},
    },
    "403": {"description": "The token lacks the scope this operation needs"},
}

SOLVER_RESPONSES: dict[int | str, dict[str, Any]] = {
    503: {
        **_problem("The solver pool is saturated (or the solver overran); retry after Retry-After seconds"),
        "headers": {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}},
    },
}
