"""Schemas of /v1/sizing."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.core.types import DeadlineS, PositiveFloat, PositiveInt, PriceUsd, Reference, not_given
from app.evaluations.schemas import Parallel, Training
from app.plans.schemas import ConstraintsIn
from solver.sizing.chinchilla import TOKENS_PER_PARAMETER

SizingRuleName = Literal["tokens_per_parameter", "parametric"]
# Budgets up to 1e12 GPU-hours or USD: past any cluster that exists, and still finite.
BudgetAmount = Annotated[float, Field(strict=True, gt=0, le=1e12, allow_inf_nan=False)]


class Budget(BaseModel):
    """What may be spent: GPU-hours, money (at the cluster's or the request's price per
    GPU-hour) or a deadline on the request's GPUs; exactly one."""

    model_config = ConfigDict(extra="forbid")

    gpu_hours: BudgetAmount | None = not_given()
    usd: BudgetAmount | None = not_given()
    deadline_s: DeadlineS | None = not_given("seconds of training on num_gpus GPUs")


SIZING_EXAMPLE: dict[str, Any] = {
    "family": "llama2-7b",
    "cluster": "dgx-h100",
    "num_gpus": 1024,
    "training": {"global_batch_size": 1024, "seq_length": 4096},
    "budget": {"deadline_s": 2592000},
}


class SizingRequest(BaseModel):
    """Either ``budget``: the compute-optimal model of ``family``'s shape (a catalog model used as
    the template: activation, vocabulary, attention grouping, MLP ratio) that trains within it
    on ``num_gpus`` GPUs of ``cluster``; or ``model``: the tokens that model should see to be
    compute-optimal, and what training it on them takes. ``rule``: Chinchilla's ~20 tokens per
    parameter, or the optimum of its parametric loss fit (Hoffmann et al. 2022)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [SIZING_EXAMPLE]})

    family: Reference = Field("llama2-7b", description="the catalog model whose family the sized model belongs to")
    model: Reference | None = not_given("size tokens for this catalog model instead of a model for a budget")
    budget: Budget | None = not_given()
    cluster: Reference
    num_gpus: PositiveInt | None = not_given("default: every GPU of the cluster (needed for a node type)")
    training: Training
    rule: SizingRuleName = "tokens_per_parameter"
    tokens_per_parameter: PositiveFloat = Field(TOKENS_PER_PARAMETER, le=1e6, description="for the tokens_per_parameter rule")
    constraints: ConstraintsIn = Field(default_factory=ConstraintsIn)
    gpu_hour_price_usd: PriceUsd | None = not_given("overrides the catalog's price")
    time_budget_s: PositiveFloat | None = not_given("per search; capped by the server's budget")


class SizedModel(BaseModel):
    """The model's shape and exact parameter count."""

    model_config = ConfigDict(extra="forbid")

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    ffn_hidden_size: int
    vocab_size: int
    seq_length: int
    mlp_activation: Literal["gelu", "swiglu", "squared_relu"]
    parameters: int


class Sizing(BaseModel):
    """The compute-optimal size (N, D), the concrete model, its predicted loss and the plan that
    trains it (stored as an ordinary plan)."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["budget", "model"]
    rule: SizingRuleName
    optimal_parameters: float = Field(description="Chinchilla's N for the compute the model was sized at")
    optimal_tokens: float = Field(description="Chinchilla's D for that compute")
    model: SizedModel
    tokens: float = Field(description="training tokens for the model (its own parameter count x the rule)")
    compute_flops: float = Field(description="6 x parameters x tokens")
    predicted_loss: float = Field(description="L(N, D) = E + A/N^alpha + B/D^beta (Hoffmann et al. 2022, Eq. 10), nats/token")
    status: Literal["succeeded", "infeasible"]
    plan_id: str | None = Field(description="the stored plan that trains it (GET /v1/plans/{id}); null if nothing fits")
    parallel: Parallel | None
    num_gpus: int
    time_to_train_s: float | None
    gpu_hours: float | None
    gpu_hour_price_usd: float | None
    cost_usd: float | None
    mfu: float | None
    budget_gpu_hours: float | None = Field(description="the budget in GPU-hours (null when a model was sized)")
    within_budget: bool | None
    iterations: int = Field(description="models sized and planned to meet the budget")
    note: str
