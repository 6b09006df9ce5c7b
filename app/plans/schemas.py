"""Schemas of /v1/plans."""

from datetime import datetime
from typing import Annotated, Literal

from pydantic import MISSING, BaseModel, ConfigDict, Field, create_model

from app.catalog.schemas import (
    ClusterSpecIn,
    ModelSpecIn,
    StoredClusterSpec,
    StoredGpuSpec,
    StoredModelSpec,
)
from app.core.dimensions import constraint_fields
from app.core.types import (
    LIST_MAX_ITEMS,
    DeadlineS,
    Flag,
    MemoryFraction,
    PositiveFloat,
    PositiveInt,
    PriceUsd,
    Reference,
    TrainTokens,
    not_given,
)
from app.evaluations.schemas import Memory, MemoryBreakdown, Parallel, PipelineStage, PredictionOut, Training
from app.profiles.schemas import ProfileDocumentOut

StrictInt = Annotated[int, Field(strict=True)]
Framework = Literal["any", "megatron", "deepspeed", "fsdp", "torchtitan"]
Objective = Literal["max_throughput", "min_time_to_train", "min_cost", "min_gpus"]
PlanStatus = Literal["succeeded", "infeasible"]


class IntRange(BaseModel):
    """An inclusive range; either end may be left open."""

    model_config = ConfigDict(extra="forbid")

    min: StrictInt | None = not_given()
    max: StrictInt | None = not_given()


IntRule = StrictInt | Annotated[list[StrictInt], Field(max_length=LIST_MAX_ITEMS)] | IntRange


ConstraintsIn = create_model(
    "ConstraintsIn",
    __doc__="""Pins and bounds on the search. Each dimension takes a value, a list of allowed values, or
    (integers) a ``{"min", "max"}`` range.""",
    __config__=ConfigDict(
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
    ),
    # The dimensions, from the solver's registry (solver.spec.dimensions), then the options.
    **constraint_fields(IntRule),
    max_memory_fraction=(MemoryFraction | None, not_given("usable fraction of each GPU's memory")),
    allow_tp_across_nodes=(Flag | None, not_given()),
    framework=(Framework | None, not_given()),
)


class CriticalBatchIn(BaseModel):
    """Let the planner choose the global batch size: the run needs ``min_tokens`` (E_min) at a
    small batch and E = E_min (1 + B / B_noise) tokens at a batch of B tokens (McCandlish et al.
    2018); B_noise is ``noise_scale_tokens``, or Kaplan et al. 2020's critical batch at
    ``target_loss``. The plan search runs at each batch size of ``global_batch_size`` (by
    doubling from min to max; default: training.global_batch_size / 8 to x 8) and keeps the one
    that trains fastest (min_time_to_train) or cheapest (min_cost). Replaces training.train_tokens."""

    model_config = ConfigDict(
        extra="forbid", title="CriticalBatch",
        json_schema_extra={"examples": [{"min_tokens": 2.6e10, "target_loss": 2.5, "global_batch_size": {"min": 64, "max": 4096}}]},
    )

    min_tokens: TrainTokens = Field(description="E_min: tokens to reach the target with a small batch")
    noise_scale_tokens: PositiveFloat | None = not_given("B_noise, tokens (measured gradient noise scale)")
    target_loss: PositiveFloat | None = not_given("target loss, nats/token: B_noise is Kaplan et al. 2020's B_crit(L)")
    global_batch_size: IntRange | None = not_given("global batch sizes (sequences) to compare")


ClusterList = Annotated[list[Reference], Field(min_length=2, max_length=8)]


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

    model: Reference | ModelSpecIn
    cluster: Reference | ClusterSpecIn | ClusterList = Field(
        description="a catalog name or inline spec; or 2 to 8 catalog names to plan on each and compare"
    )
    num_gpus: PositiveInt | None = None
    training: Training
    critical_batch: CriticalBatchIn | None = not_given()
    objective: Objective = "max_throughput"
    constraints: ConstraintsIn = Field(default_factory=ConstraintsIn)
    top_k: Annotated[int, Field(strict=True, ge=1, le=50)] = 5
    deadline_s: DeadlineS | None = Field(None, description="for min_gpus: the time to train to meet")
    gpu_hour_price_usd: PriceUsd | None = Field(None, description="for min_cost; overrides the cluster's price")
    time_budget_s: PositiveFloat | None = None
    profile_id: Reference | None = Field(
        None, description="a measured profile (POST /v1/profiles) to plan from instead of the analytic model"
    )


class CandidateOut(BaseModel):
    """One ranked configuration with its prediction."""

    model_config = ConfigDict(extra="forbid", title="Candidate")

    rank: int = Field(description="1 is the best")
    parallel: Parallel
    objective_value: float = Field(
        description="lower is better: s/token (max_throughput), s (min_time_to_train), USD (min_cost; USD/token"
        " without train_tokens) or GPUs (min_gpus)"
    )
    why: str = Field(description="why it ranks where it does against the next candidate")
    feasible: bool
    violations: list[str]
    prediction: PredictionOut
    memory: Memory
    stages: list[PipelineStage]
    profile_origins: dict[str, str] = Field(description="layer name -> measured, derived or analytic")


class SearchStatistics(BaseModel):
    """What the search did."""

    model_config = ConfigDict(extra="forbid")

    configurations_enumerated: int
    configurations_pruned: int = Field(description="not evaluated: a lower bound showed they cannot win")
    configurations_illegal: int
    configurations_evaluated: int
    cpsat_calls: int = Field(description="CP-SAT partition solves")
    cpsat_status: dict[str, int] = Field(description="CP-SAT status name -> solves that ended with it")
    partition_methods: dict[str, int] = Field(description="partition method (fast, chain, cpsat, fixed) -> solves")
    wall_time_s: float
    proven_optimal: bool = Field(description="optimal under the cost model: exact partitions, no time-out")
    timed_out: bool = Field(description="the search hit its time budget")


class MemoryMissOut(BaseModel):
    """The legal configuration that comes closest to fitting in memory, evaluated."""

    model_config = ConfigDict(extra="forbid", title="MemoryMiss")

    text: str
    peak_gib: float = Field(description="its memory per GPU, GiB")
    usable_gib: float = Field(description="the memory a GPU may use, GiB")
    num_gpus: int
    parallel: Parallel
    memory_gib: MemoryBreakdown = Field(description="its peak stage's memory by kind")
    fits: bool


class DeadlineMissOut(BaseModel):
    """The fastest plan, when no GPU count meets the deadline."""

    model_config = ConfigDict(extra="forbid", title="DeadlineMiss")

    text: str
    time_to_train_s: float | None
    num_gpus: int
    parallel: Parallel


class SuggestionOut(BaseModel):
    """A change to the request, checked by searching again, and the plan it finds."""

    model_config = ConfigDict(extra="forbid", title="Suggestion")

    change: str
    checked: bool
    num_gpus: int
    parallel: Parallel
    step_time_s: float
    time_to_train_s: float | None
    peak_gib: float


class ExplanationOut(BaseModel):
    """Why a search found no plan, and the smallest changes that would find one."""

    model_config = ConfigDict(extra="forbid", title="Explanation")

    binding_constraint: str = Field(description="the rule that rejected the most (memory and deadline first)")
    binding_text: str
    rejections: dict[str, int] = Field(description="rule -> configurations it rejected")
    closest_miss: MemoryMissOut | DeadlineMissOut | None
    suggestions: list[SuggestionOut]
    summary: str


class SearchOutcome(BaseModel):
    """``solver.search.SearchResult.to_dict()``, typed: what a search returns."""

    model_config = ConfigDict(extra="forbid")

    status: PlanStatus
    best: CandidateOut | None
    candidates: list[CandidateOut]
    search: SearchStatistics
    explanation: ExplanationOut | None


class Versions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    solver: str
    ortools: str


class NormalisedRequest(BaseModel):
    """The plan request as stored: defaults filled in, unset options absent."""

    model_config = ConfigDict(extra="forbid")

    model: str | StoredModelSpec
    cluster: str | StoredClusterSpec | list[str]
    num_gpus: int | MISSING = MISSING
    training: Training
    critical_batch: CriticalBatchIn | MISSING = MISSING
    objective: Objective
    constraints: ConstraintsIn
    top_k: int
    deadline_s: float | MISSING = MISSING
    gpu_hour_price_usd: float | MISSING = MISSING
    time_budget_s: float
    profile_id: str | MISSING = MISSING


# Where a resolved entry came from: the built-in catalog, a custom entry, or the request itself.
EntrySource = Literal["builtin", "custom", "inline"]


class ModelSnapshot(BaseModel):
    """The model the request named or carried, as it was resolved."""

    model_config = ConfigDict(extra="forbid")

    source: EntrySource
    entry: StoredModelSpec


class ClusterSnapshot(BaseModel):
    """The cluster the request named or carried, as it was resolved."""

    model_config = ConfigDict(extra="forbid")

    source: EntrySource
    entry: StoredClusterSpec


class GpuSnapshot(BaseModel):
    """The cluster's GPU, as it was resolved."""

    model_config = ConfigDict(extra="forbid")

    source: EntrySource
    entry: StoredGpuSpec


class ProfileSnapshot(BaseModel):
    """The measured profile the plan was computed from."""

    model_config = ConfigDict(extra="forbid")

    id: str
    document: ProfileDocumentOut


class CatalogSnapshot(BaseModel):
    """The catalog entries (and the measured profile) the plan was computed from."""

    model_config = ConfigDict(extra="forbid")

    model: ModelSnapshot
    cluster: ClusterSnapshot
    gpu: GpuSnapshot
    profile: ProfileSnapshot | MISSING = MISSING


class BatchPointOut(BaseModel):
    """The best plan at one global batch size, and what reaching the target with it takes."""

    model_config = ConfigDict(extra="forbid", title="BatchPoint")

    global_batch_size: int = Field(description="sequences per step")
    tokens_per_step: float
    status: PlanStatus
    steps: float = Field(description="S = S_min (1 + B_noise / B)")
    min_steps: float = Field(description="S_min = E_min / B_noise")
    tokens: float = Field(description="E = E_min (1 + B / B_noise)")
    extra_tokens: float = Field(description="E - E_min: the tokens this batch's size costs")
    num_gpus: int | None
    parallel: Parallel | None
    step_time_s: float | None
    tokens_per_s: float | None
    time_to_train_s: float | None = Field(description="steps x step_time_s = tokens / tokens_per_s")
    time_for_min_tokens_s: float | None = Field(description="E_min / tokens_per_s: the work any batch does")
    time_for_extra_tokens_s: float | None = Field(description="extra_tokens / tokens_per_s: what the batch's size adds")
    cost_usd: float | None
    objective_value: float | None


class BatchChoiceOut(BaseModel):
    """How the global batch size was chosen (requests with ``critical_batch``). The plan's
    candidates are the search at ``chosen_global_batch_size``."""

    model_config = ConfigDict(extra="forbid", title="BatchChoice")

    noise_scale_tokens: float = Field(description="B_noise (B_crit), tokens")
    noise_scale_source: Literal["request", "kaplan2020"]
    target_loss: float | None = Field(description="nats/token, when B_noise is Kaplan et al. 2020's B_crit(L)")
    min_tokens: float = Field(description="E_min, tokens")
    min_steps: float = Field(description="S_min = E_min / B_noise")
    reference_global_batch_size: int = Field(description="the request's training.global_batch_size")
    chosen_global_batch_size: int | None = Field(description="null: nothing fits at any batch compared")
    points: list[BatchPointOut]
    summary: str


class ClusterRowOut(BaseModel):
    """One cluster's best plan, beside the others'."""

    model_config = ConfigDict(extra="forbid", title="ClusterRow")

    cluster: str
    status: PlanStatus
    num_gpus: int | None
    parallel: Parallel | None
    global_batch_size: int | None
    step_time_s: float | None
    tokens_per_s: float | None
    mfu: float | None
    time_to_train_s: float | None
    gpu_hour_price_usd: float | None
    cost_usd: float | None = Field(description="time_to_train_s x GPUs x GPU-hour price")
    objective_value: float | None
    summary: str = Field(description="the best plan in words, or why nothing fits")


class ClusterComparisonOut(BaseModel):
    """Requests naming several clusters: each cluster's best plan side by side, and which won
    (lowest objective value). The plan's candidates and snapshot are the winner's."""

    model_config = ConfigDict(extra="forbid", title="ClusterComparison")

    objective: Objective
    chosen_cluster: str | None = Field(description="null: nothing fits on any cluster")
    reason: str
    clusters: list[ClusterRowOut]


class Plan(BaseModel):
    """A stored plan: the normalised request, the result and what it was computed from."""

    model_config = ConfigDict(extra="forbid")

    id: str
    created_at: datetime
    status: PlanStatus
    timed_out: bool = Field(description="the search hit its time budget; the plan is the best found so far")
    request: NormalisedRequest
    best: CandidateOut | None
    candidates: list[CandidateOut]
    search: SearchStatistics
    explanation: ExplanationOut | None = Field(description="null when a plan was found")
    batch_choice: BatchChoiceOut | MISSING = MISSING
    cluster_comparison: ClusterComparisonOut | MISSING = MISSING
    catalog_snapshot: CatalogSnapshot
    versions: Versions


# defer_build=True: a model that answering a plan never uses builds its schema when first used,
# not when `partitura plan` imports this module (bench/cli.py, issue 17).
class PlanSummary(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid")

    id: str
    created_at: datetime
    status: PlanStatus
    model: str
    cluster: str
    objective: str
    num_gpus: int
    timed_out: bool
    best_parallel: Parallel | None
    best_tokens_per_s: float | None


class PlanList(BaseModel):
    """A page of plans, newest first; pass ``next_cursor`` as ``cursor`` for the next page."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    items: list[PlanSummary]
    next_cursor: str | None


# --------------------------------------------------------------------------- launch-config export

ExportFormatName = Literal["megatron", "deepspeed", "torchtitan", "nemo"]


class ExportDifference(BaseModel):
    """One way the exported configuration differs from the plan, and why."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    field: str = Field(description="the plan's field, e.g. parallel.full_recompute_layers or training.precision")
    planned: str = Field(description="its value in the plan (JSON-like text)")
    exported: str = Field(description="its value in the export")
    reason: str


class ExportFile(BaseModel):
    """One file of the launch config."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    name: str = Field(description="e.g. pretrain_gpt.sh, ds_config.json, job.toml, nemo_overrides.yaml")
    media_type: str
    content: str


class ExportPrediction(BaseModel):
    """What the export's files run as the cost model predicts it, evaluated afresh with that
    framework's mechanics (so an exact DeepSpeed export may differ from a plan searched for any
    framework) and judged by that framework's own rules."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    feasible: bool = Field(description="fits in memory and breaks no rule")
    violations: list[str]
    step_time_s: float
    tokens_per_s: float
    peak_memory_gib: float


class PlanExport(BaseModel):
    """A plan candidate as one framework's launch config. ``exact`` is true only when the files
    run the candidate as planned; otherwise ``parallel`` is the nearest configuration the
    framework runs exactly and ``differences`` names every change."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    plan_id: str
    candidate: int = Field(description="index into the plan's candidates (0 is the best)")
    format: ExportFormatName
    exact: bool
    parallel: Parallel = Field(description="the configuration the files run")
    differences: list[ExportDifference]
    files: list[ExportFile]
    notes: list[str] = Field(description="what the files leave to you: data, tokenizer, model code")
    prediction: ExportPrediction | None = Field(description="null when the plan's measured profile can no longer be read")
