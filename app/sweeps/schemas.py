"""Schemas of /v1/sweeps."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.catalog.schemas import ModelSpecIn
from app.core.types import Fraction, PositiveFloat, PositiveInt, PriceUsd, Reference, Size, not_given
from app.evaluations.schemas import Parallel, Training
from app.plans.schemas import ConstraintsIn
from solver.sweep.analysis import DEFAULT_EFFICIENCY_THRESHOLD
from solver.sweep.grid import MAX_SWEEP_POINTS

# Clusters one sweep may compare (GPU types, usually).
MAX_SWEEP_CLUSTERS = 8
SweepObjective = Literal["max_throughput", "min_time_to_train", "min_cost"]
PointStatus = Literal["succeeded", "infeasible"]


class SweepRange(BaseModel):
    """An inclusive range of integers: ``min``, ``min + step``, ... or ``min``, ``min * factor``,
    ... up to ``max``; exactly one of ``step`` and ``factor``."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"min": 8, "max": 1024, "factor": 2}]})

    min: PositiveInt
    max: PositiveInt
    step: PositiveInt | None = not_given("arithmetic range: the difference of neighbouring values")
    factor: Annotated[int, Field(strict=True, ge=2)] | None = not_given("geometric range: the ratio of neighbouring values")


GpuAxis = PositiveInt | Annotated[list[PositiveInt], Field(min_length=1, max_length=MAX_SWEEP_POINTS)] | SweepRange
BatchAxis = Size | Annotated[list[Size], Field(min_length=1, max_length=MAX_SWEEP_POINTS)] | SweepRange


class SweepTraining(Training):
    """Training settings of every point; ``global_batch_size`` may be a value, a list or a range,
    and ``train_tokens`` is needed (a sweep compares time to train and cost)."""

    model_config = ConfigDict(extra="forbid", title="SweepTraining")

    global_batch_size: BatchAxis  # type: ignore[assignment]


class ClusterPrice(BaseModel):
    """A GPU-hour price for one of the sweep's clusters."""

    model_config = ConfigDict(extra="forbid")

    cluster: Reference
    gpu_hour_price_usd: PriceUsd


SWEEP_EXAMPLE: dict[str, Any] = {
    "model": "gpt3-1.3b",
    "cluster": ["dgx-a100-80gb", "dgx-h100"],
    "num_gpus": {"min": 8, "max": 64, "factor": 2},
    "training": {"global_batch_size": 512, "seq_length": 2048, "train_tokens": 3e11},
    "objective": "min_time_to_train",
}


class SweepRequest(BaseModel):
    """Plan the same job at every combination of ``cluster`` (catalog clusters or node types, a
    name or a list), ``num_gpus`` and ``training.global_batch_size`` (each a value, a list or a
    range), with one objective and one set of constraints. A node type is sized to each point's
    GPU count; a point with more GPUs than a named cluster has is reported infeasible. Prices
    per GPU-hour come from ``gpu_hour_price_usd`` (one for all clusters, or one per cluster),
    else from the catalog cluster (a node type takes the price of the first catalog cluster of
    that node type); a point without a price has no cost."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [SWEEP_EXAMPLE]})

    model: Reference | ModelSpecIn
    cluster: Reference | Annotated[list[Reference], Field(min_length=1, max_length=MAX_SWEEP_CLUSTERS)]
    num_gpus: GpuAxis
    training: SweepTraining
    objective: SweepObjective = "max_throughput"
    constraints: ConstraintsIn = Field(default_factory=ConstraintsIn)
    top_k: Annotated[int, Field(strict=True, ge=1, le=50)] = Field(1, description="candidates kept in each point's plan")
    gpu_hour_price_usd: PriceUsd | Annotated[list[ClusterPrice], Field(max_length=MAX_SWEEP_CLUSTERS)] | None = not_given(
        "one price for every cluster, or a price per cluster; overrides the catalog's"
    )
    efficiency_threshold: Fraction = Field(
        DEFAULT_EFFICIENCY_THRESHOLD, description="the knee is the first GPU count whose scaling efficiency falls below this"
    )
    time_budget_s: PositiveFloat | None = not_given("per point; capped by the server's budget")


class PowerLawOut(BaseModel):
    """``time = a_s * num_gpus^-b``, fitted by least squares in log space (b = 1 is linear
    scaling)."""

    model_config = ConfigDict(extra="forbid", title="PowerLaw")

    a_s: float = Field(description="seconds: the time the law extrapolates to on one GPU")
    b: float
    r_squared: float = Field(description="of the fit of ln(time) on ln(num_gpus)")
    num_points: int


class SweepSeriesOut(BaseModel):
    """The feasible points of one cluster at one global batch size, by GPU count."""

    model_config = ConfigDict(extra="forbid", title="SweepSeries")

    cluster: str
    global_batch_size: int
    num_gpus: list[int]
    time_s: list[float] = Field(description="the fitted quantity at each count (see fitted_quantity), seconds")
    scaling_efficiency: list[float] = Field(description="throughput per GPU against the series' smallest count")
    fit: PowerLawOut | None = Field(description="null with fewer than two feasible counts")
    knee_num_gpus: int | None = Field(description="the first count whose efficiency is below the threshold; null: none")


class SweepPointOut(BaseModel):
    """One point and the figures of its best plan (null where it has none)."""

    model_config = ConfigDict(extra="forbid", title="SweepPoint")

    index: int
    cluster: str
    num_gpus: int
    global_batch_size: int
    status: PointStatus
    plan_id: str | None = Field(description="the point's stored plan (GET /v1/plans/{id}); null if it was not planned")
    parallel: Parallel | None
    step_time_s: float | None
    tokens_per_s: float | None
    mfu: float | None
    time_to_train_s: float | None
    gpu_hour_price_usd: float | None
    cost_usd: float | None = Field(description="num_gpus x time to train (h) x price per GPU-hour")
    scaling_efficiency: float | None
    on_pareto_front: bool
    note: str | None = Field(description="why an infeasible point has no plan")


class PriceSource(BaseModel):
    """The GPU-hour price a cluster's points were costed at, and where it came from."""

    model_config = ConfigDict(extra="forbid")

    cluster: str
    gpu_hour_price_usd: float | None
    source: str


class SweepCharts(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scaling_svg: str = Field(description="URL of the scaling chart (image/svg+xml)")
    pareto_svg: str = Field(description="URL of the Pareto chart (image/svg+xml)")


class Sweep(BaseModel):
    """A stored sweep: the request, every point with its plan, the scaling series with their
    power-law fits and knees, and the Pareto front of time to train against cost."""

    model_config = ConfigDict(extra="forbid")

    id: str
    created_at: datetime
    request: SweepRequest
    points: list[SweepPointOut]
    series: list[SweepSeriesOut]
    fitted_quantity: Literal["time_to_train_s", "step_time_s"]
    efficiency_threshold: float
    pareto_front: list[int] = Field(description="indices of the points on the front, fastest first")
    prices: list[PriceSource]
    charts: SweepCharts
