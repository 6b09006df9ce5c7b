"""The job resource as the API answers it."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]


class JobResult(BaseModel):
    """What a succeeded job produced."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["sweep", "plan"]
    id: str
    href: str = Field(description="the sweep or plan: GET it")


class JobFieldError(BaseModel):
    model_config = ConfigDict(extra="forbid")

    field: str
    reason: str


class JobProblem(BaseModel):
    """Why a job failed: the problem document (RFC 9457) its point or its result met."""

    model_config = ConfigDict(extra="forbid")

    type: str
    title: str
    status: int
    detail: str
    errors: list[JobFieldError] | None = None


class Job(BaseModel):
    """Long work (a sweep, or a plan asked with ``Prefer: respond-async``) as it stands."""

    model_config = ConfigDict(extra="forbid")

    id: str
    kind: Literal["sweep", "plan"]
    status: JobStatus = Field(description="queued, running, succeeded, failed or cancelled (the last three are final)")
    points_done: int = Field(ge=0, description="points planned (a plan job has one)")
    points_total: int = Field(ge=0)
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    result: JobResult | None = Field(None, description="the stored sweep or plan, once succeeded")
    error: JobProblem | None = Field(None, description="why the job failed")
    href: str = Field(description="this job: GET to poll, DELETE to cancel")
