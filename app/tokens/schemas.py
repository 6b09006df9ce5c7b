"""Schemas of /v1/tokens."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from app.core.types import EntryName, not_given
from app.tokens.scopes import Scope

PlansPerMinute = Annotated[int, Field(strict=True, ge=0, le=1_000_000)]


class TokenRequest(BaseModel):
    """A token to create. ``plans_per_minute`` overrides the service's quota
    (PARTITURA_QUOTA_PLANS_PER_MINUTE) for this token; 0 means no limit."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"name": "ci-planner", "scopes": ["read", "plan"]}]}
    )

    name: EntryName
    scopes: Annotated[list[Scope], Field(min_length=1, max_length=3)]
    plans_per_minute: PlansPerMinute | None = not_given("plan requests a minute; default: the service's quota")


class Token(BaseModel):
    """A token as stored: never the token itself, which is shown once, when it is created."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="public; stored resources record it as their owner")
    name: str
    token_prefix: str = Field(description="the token's first characters, to tell tokens apart")
    scopes: list[Scope]
    created_at: datetime
    last_used_at: datetime | None = Field(description="to the minute: a request updates it at most once a minute")
    revoked_at: datetime | None
    plans_per_minute: int | None = Field(description="null: the service's quota")


class TokenCreated(Token):
    """A new token. ``token`` is shown this once; only its SHA-256 is stored."""

    model_config = ConfigDict(extra="forbid")

    token: str = Field(description="send as `Authorization: Bearer <token>`")


class TokenList(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[Token]
