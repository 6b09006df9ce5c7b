"""Job rows: the job (what was asked, its status and result) and one row per point of work.

A point is the unit a worker runs and retries. ``(job_id, position)`` is unique and a point
turns ``succeeded`` only by a conditional update from another status, so however often a point
is retried (a killed worker's point is run again) it completes once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.core.db import Base, JsonDocument, UtcDateTime

JOB_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
# A job in one of these may still change; the others are final.
OPEN_STATUSES = ("queued", "running")
POINT_STATUSES = ("queued", "running", "succeeded", "cancelled")
JOB_KINDS = ("sweep", "plan")


class Job(Base):
    """A job as asked (``request``: the POST body, defaults filled in), where it stands, and its
    result: the stored sweep or plan (``result_id``) or the problem that failed it (``error``)."""

    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_created_at_id", "created_at", "id"),
        CheckConstraint("status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')", name="status"),
        CheckConstraint("kind IN ('sweep', 'plan')", name="kind"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), index=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)
    request: Mapped[dict[str, Any]] = mapped_column(JsonDocument)
    points_total: Mapped[int] = mapped_column(Integer)
    # The sweep's or plan's id once the job succeeded (no key: the result may be deleted later).
    result_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    # The problem document (RFC 9457) that failed the job.
    error: Mapped[dict[str, Any] | None] = mapped_column(JsonDocument, nullable=True)
    # The API token (app.tokens) that created it; null when authentication was off.
    owner_token_id: Mapped[str | None] = mapped_column(String(36), index=True, nullable=True)


class JobPoint(Base):
    """One point of a job: the plan request a worker runs (null: nothing to plan, ``note`` says
    why), how often it was started, and the plan it produced."""

    __tablename__ = "job_points"
    __table_args__ = (
        UniqueConstraint("job_id", "position", name="uq_job_points_job_id_position"),
        CheckConstraint("status IN ('queued', 'running', 'succeeded', 'cancelled')", name="status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    request: Mapped[dict[str, Any] | None] = mapped_column(JsonDocument, nullable=True)
    note: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Times a worker started the point (more than one: it was retried, e.g. its worker died).
    attempts: Mapped[int] = mapped_column(Integer)
    plan_id: Mapped[str | None] = mapped_column(ForeignKey("plans.id", ondelete="SET NULL"), index=True, nullable=True)
    completed_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)
