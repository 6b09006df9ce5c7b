"""Custom catalog entries: models and clusters that users add next to the built-in catalog."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.core.db import Base, JsonDocument, UtcDateTime


class CustomModel(Base):
    __tablename__ = "custom_models"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JsonDocument)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    # The API token (app.tokens) that created it; null when authentication was off.
    owner_token_id: Mapped[str | None] = mapped_column(String(36), index=True, nullable=True)


class CustomCluster(Base):
    __tablename__ = "custom_clusters"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JsonDocument)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    # The API token (app.tokens) that created it; null when authentication was off.
    owner_token_id: Mapped[str | None] = mapped_column(String(36), index=True, nullable=True)
