"""API token rows. The token itself is never stored: ``token_hash`` is its SHA-256, and the
token is shown once, when it is created."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.core.db import Base, UtcDateTime


class ApiToken(Base):
    """One API token: who it is (``name``), what it may do (``scopes``, space-separated as in
    OAuth 2.0), and its quota state.

    ``id`` is public: stored plans, sweeps, profiles and custom catalog entries record it as
    their owner. ``rate_window_start_s`` / ``rate_window_requests`` are the fixed one-minute
    window of plan requests (app.core.auth), kept here so every worker and replica counts the
    same requests.
    """

    __tablename__ = "api_tokens"
    __table_args__ = (Index("ix_api_tokens_created_at_id", "created_at", "id"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    # SHA-256 (hex) of the token; the unique key by which a request's token is found.
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # The token's first characters ("ptk_" and 8 more: 48 of its 256 random bits), to tell
    # tokens apart in a listing.
    token_prefix: Mapped[str] = mapped_column(String(16))
    scopes: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)
    # Plan requests a minute for this token; null: the service default (PARTITURA_QUOTA_PLANS_PER_MINUTE).
    plans_per_minute: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Start (Unix seconds, a multiple of 60) of the current rate window and the requests in it.
    rate_window_start_s: Mapped[int] = mapped_column(BigInteger, default=0)
    rate_window_requests: Mapped[int] = mapped_column(Integer, default=0)
