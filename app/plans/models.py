"""Plan rows: one per distinct request, with its ranked candidates."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, CheckConstraint, Float, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.core.db import Base, JsonDocument, UtcDateTime

PLAN_STATUSES = ("succeeded", "infeasible")


class Plan(Base):
    """A search result as it was answered, reproducible from its own row.

    ``request_hash`` (SHA-256 of the normalised request, the catalog snapshot and the solver
    version) is unique: the database, not the process, decides which of two identical requests
    stores the plan.
    """

    __tablename__ = "plans"
    __table_args__ = (
        CheckConstraint("status IN ('succeeded', 'infeasible')", name="status"),
        Index("ix_plans_created_at_id", "created_at", "id"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    request_hash: Mapped[str] = mapped_column(String(64), unique=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    model_name: Mapped[str] = mapped_column(String(128), index=True)
    cluster_name: Mapped[str] = mapped_column(String(128), index=True)
    objective: Mapped[str] = mapped_column(String(32))
    num_gpus: Mapped[int] = mapped_column(Integer)
    timed_out: Mapped[bool] = mapped_column(Boolean)
    request: Mapped[dict[str, Any]] = mapped_column(JsonDocument)
    catalog_snapshot: Mapped[dict[str, Any]] = mapped_column(JsonDocument)
    solver_version: Mapped[str] = mapped_column(String(64))
    ortools_version: Mapped[str] = mapped_column(String(64))
    search_stats: Mapped[dict[str, Any]] = mapped_column(JsonDocument)
    explanation: Mapped[dict[str, Any] | None] = mapped_column(JsonDocument, nullable=True)
    # The API token (app.tokens) that created it; null when authentication was off.
    owner_token_id: Mapped[str | None] = mapped_column(String(36), index=True, nullable=True)

    candidates: Mapped[list["PlanCandidate"]] = relationship(
        back_populates="plan",
        order_by="PlanCandidate.rank",
        cascade="all, delete-orphan",
        passive_deletes=True,
        lazy="selectin",
    )


class PlanCandidate(Base):
    """One ranked configuration of a plan; ``document`` is the candidate as the API shows it."""

    __tablename__ = "plan_candidates"
    __table_args__ = (UniqueConstraint("plan_id", "rank", name="uq_plan_candidates_plan_id_rank"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    plan_id: Mapped[str] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    rank: Mapped[int] = mapped_column(Integer)
    step_time_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    tokens_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    peak_memory_gib: Mapped[float | None] = mapped_column(Float, nullable=True)
    parallel: Mapped[dict[str, Any]] = mapped_column(JsonDocument)
    document: Mapped[dict[str, Any]] = mapped_column(JsonDocument)

    plan: Mapped[Plan] = relationship(back_populates="candidates")
