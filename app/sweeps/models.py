"""Sweep rows: the request and its analysis, and one row per point linking the point's plan."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.core.db import Base, JsonDocument, UtcDateTime


class Sweep(Base):
    """A sweep as it was answered: the request (as given, defaults filled in) and the analysis
    of its points (series, fits, knees, Pareto front), computed once when it was planned."""

    __tablename__ = "sweeps"
    __table_args__ = (Index("ix_sweeps_created_at_id", "created_at", "id"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    model_name: Mapped[str] = mapped_column(String(128), index=True)
    num_points: Mapped[int] = mapped_column(Integer)
    request: Mapped[dict[str, Any]] = mapped_column(JsonDocument)
    analysis: Mapped[dict[str, Any]] = mapped_column(JsonDocument)
    # The API token (app.tokens) that created it; null when authentication was off.
    owner_token_id: Mapped[str | None] = mapped_column(String(36), index=True, nullable=True)

    points: Mapped[list["SweepPoint"]] = relationship(
        back_populates="sweep",
        order_by="SweepPoint.position",
        cascade="all, delete-orphan",
        passive_deletes=True,
        lazy="selectin",
    )


class SweepPoint(Base):
    """One point of a sweep. ``plan_id`` is the point's stored plan (null when the point could
    not be planned, e.g. more GPUs than its cluster has, or once that plan is deleted);
    ``document`` holds the point's figures as the API shows them, so they outlive the plan."""

    __tablename__ = "sweep_points"
    __table_args__ = (
        UniqueConstraint("sweep_id", "position", name="uq_sweep_points_sweep_id_position"),
        CheckConstraint("status IN ('succeeded', 'infeasible')", name="status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    sweep_id: Mapped[str] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    plan_id: Mapped[str | None] = mapped_column(ForeignKey("plans.id", ondelete="SET NULL"), index=True, nullable=True)
    status: Mapped[str] = mapped_column(String(16))
    cluster_name: Mapped[str] = mapped_column(String(128))
    num_gpus: Mapped[int] = mapped_column(Integer)
    global_batch_size: Mapped[int] = mapped_column(Integer)
    document: Mapped[dict[str, Any]] = mapped_column(JsonDocument)

    sweep: Mapped[Sweep] = relationship(back_populates="points")
