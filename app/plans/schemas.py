"""Schemas of /v1/plans."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.catalog.schemas import ClusterSpecIn, ModelSpecIn
from app.core.types import Fraction, NonNegativeFloat, PositiveFloat, PositiveInt
from app.evaluations.schemas import Memory, PredictionOut, Training

StrictInt = Annotated[int, Field(strict=True)]
RecomputeName = Literal["none", "selective", "full"]


class IntRange(BaseModel):
    """An inclusive range; either end may be left open."""

    model_config = ConfigDict(extra="forbid")

    min: StrictInt | None = None
    max: StrictInt | None = None


IntRule = StrictInt | list[StrictInt] | IntRange


class ConstraintsIn(BaseModel):
    """Pins and bounds on the search. Each dimension takes a value, a list of allowed values, or
    (integers) a ``{"min", "max"}`` range."""

    model_config = ConfigDict(
        extra="forbid",
        title="Constraints",
        json_schema_extra={
            "examples": [
                {
                    "tp_size": 8, "pp_size": [4, 8, 16], "micro_batch_size": {"min": 1, "max": 4},
                    "recompute": ["selective", "full"], "zero_stage": 1, "virtual_stages": 1,
                    "sequence_parallel": True, "dp_size": 16,
                }
            ]
        },
    )

    dp_size: IntRule | None = None
    tp_size: IntRule | None = None
    pp_size: IntRule | None = None
    zero_stage: IntRule | None = None
    micro_batch_size: IntRule | None = None
    virtual_stages: IntRule | None = None
    num_gpus: IntRule | None = None
    recompute: RecomputeName | list[RecomputeName] | None = None
    sequence_parallel: bool | list[bool] | None = None
    max_memory_fraction: Fraction | None = Field(None, description="usable fraction of each GPU's memory")
    allow_tp_across_nodes: bool | None = None
    framework: Literal["any", "megatron", "deepspeed", "fsdp"] | None = None


PLAN_EXAMPLE = {
    "model": "gpt3-1.3b",
    "cluster": "dgx-a100-80gb-x1",
    "num_gpus": 8,
    "training": {"global_batch_size": 512, "seq_length": 2048, "precision": "bf16", "optimizer": "adam", "train_tokens": 3e11},
    "objective": "max_throughput",
    "constraints": {"tp_size": [1, 2, 4, 8], "micro_batch_size": {"min": 1, "max": 4}},
    "top_k": 5,
}


class PlanRequest(BaseModel):
    """Search for the best ways to split training. ``model`` and ``cluster`` are catalog names
    (built-in or custom) or inline specs; ``num_gpus`` defaults to every GPU of the cluster.
    ``time_budget_s`` is capped by the server's budget; a search that hits it returns the best
    plan found so far with ``timed_out: true``."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [PLAN_EXAMPLE]})

    model: str | ModelSpecIn
    cluster: str | ClusterSpecIn
    num_gpus: PositiveInt | None = None
    training: Training
    objective: Literal["max_throughput", "min_time_to_train", "min_cost", "min_gpus"] = "max_throughput"
    constraints: ConstraintsIn = Field(default_factory=ConstraintsIn)
    top_k: Annotated[int, Field(strict=True, ge=1, le=50)] = 5
    deadline_s: PositiveFloat | None = Field(None, description="for min_gpus: the time to train to meet")
    gpu_hour_price_usd: NonNegativeFloat | None = Field(None, description="for min_cost; overrides the cluster's price")
    time_budget_s: PositiveFloat | None = None
    profile_id: str | None = Field(
        None, description="a measured profile (POST /v1/profiles) to plan from instead of the analytic model"
    )


class Candidate(BaseModel):
    """One ranked configuration with its prediction."""

    model_config = ConfigDict(extra="allow")

    rank: int
    parallel: dict[str, Any]
    prediction: PredictionOut | None
    memory: Memory
    stages: list[dict[str, Any]] = Field(default_factory=list)


class Versions(BaseModel):
    solver: str
    ortools: str


class NormalisedRequest(BaseModel):
    """The plan request as stored: defaults filled in, unset options dropped."""

    model_config = ConfigDict(extra="allow")

    model: str | dict[str, Any]
    cluster: str | dict[str, Any]
    training: dict[str, Any]
    objective: str
    constraints: dict[str, Any]
    top_k: int
    time_budget_s: float


class Plan(BaseModel):
    """A stored plan: the normalised request, the result and what it was computed from."""

    model_config = ConfigDict(extra="allow")

    id: str
    created_at: datetime
    status: Literal["succeeded", "infeasible"]
    timed_out: bool = Field(description="the search hit its time budget; the plan is the best found so far")
    request: NormalisedRequest
    best: Candidate | None
    candidates: list[Candidate]
    search: dict[str, Any]
    explanation: dict[str, Any] | None
    catalog_snapshot: dict[str, Any]
    versions: Versions


class PlanSummary(BaseModel):
    id: str
    created_at: datetime
    status: Literal["succeeded", "infeasible"]
    model: str
    cluster: str
    objective: str
    num_gpus: int
    timed_out: bool
    best_parallel: dict[str, Any] | None
    best_tokens_per_s: float | None


class PlanList(BaseModel):
    """A page of plans, newest first; pass ``next_cursor`` as ``cursor`` for the next page."""

    items: list[PlanSummary]
    next_cursor: str | None
