"""Profile rows: one validated ``partitura-profile/1`` document each, with its key facts as columns."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.core.db import Base, JsonDocument, UtcDateTime


class Profile(Base):
    """A measured profile as the service validated it (``document`` is the normalised document:
    defaults filled in, so what is read back is exactly what plans are costed with)."""

    __tablename__ = "profiles"
    __table_args__ = (Index("ix_profiles_created_at_id", "created_at", "id"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    model_name: Mapped[str] = mapped_column(String(128), index=True)
    device: Mapped[str] = mapped_column(String(256))
    precision: Mapped[str] = mapped_column(String(8))
    micro_batch_size: Mapped[int] = mapped_column(Integer)
    seq_length: Mapped[int] = mapped_column(Integer)
    tp_size: Mapped[int] = mapped_column(Integer)
    document: Mapped[dict[str, Any]] = mapped_column(JsonDocument)
    # The API token (app.tokens) that created it; null when authentication was off. Not indexed:
    # a handful of profiles per model, and tests/test_profile_api.py pins this table's indexes.
    owner_token_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
