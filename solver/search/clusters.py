"""Which GPUs: the same plan request on several clusters, and the comparison that picks one.

``plan_clusters`` runs one search per cluster (through ``solver.batch.choose`` when the request
lets the planner choose the batch); ``compare_clusters`` puts their best plans side by side and
picks the one with the lowest objective value, in the objective's own unit (s/token for
max_throughput, s for min_time_to_train, USD for min_cost, GPUs for min_gpus), so that the
clusters are ranked by exactly what each search minimised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from solver.batch.choose import BatchChoice, BatchRequest, choose_batch
from solver.cost.price import gpu_time_cost_usd
from solver.search.loop import search
from solver.search.request import Objective, SearchRequest
from solver.search.result import SearchResult
from solver.spec.parallel import ParallelConfig

# The most clusters one plan request may compare (each is a full search, or one per batch).
MAX_CLUSTERS = 8


@dataclass(frozen=True)
class ClusterPlan:
    """One cluster's search: its result and, when the planner chose the batch, that choice."""

    result: SearchResult
    batch: BatchChoice | None


def plan_one(request: SearchRequest, batch: BatchRequest | None = None) -> ClusterPlan:
    """The search for one cluster (with the batch chosen when ``batch`` is given)."""
    if batch is None:
        return ClusterPlan(search(request), None)
    result, choice = choose_batch(request, batch)
    return ClusterPlan(result, choice)


def plan_clusters(requests: Sequence[SearchRequest], batch: BatchRequest | None = None) -> list[ClusterPlan]:
    """Each request's search, in order (one process: each search is deterministic)."""
    return [plan_one(request, batch) for request in requests]


@dataclass(frozen=True)
class ClusterRow:
    """One cluster's best plan, side by side with the others'. Figures are None when nothing fits."""

    cluster: str
    feasible: bool
    num_gpus: int | None
    parallel: ParallelConfig | None
    global_batch_size: int | None
    step_time_s: float | None
    tokens_per_s: float | None
    mfu: float | None
    time_to_train_s: float | None
    gpu_hour_price_usd: float | None
    cost_usd: float | None  # time_to_train_s x GPUs x price (None without tokens or a price)
    objective_value: float | None


@dataclass(frozen=True)
class ClusterComparison:
    objective: Objective
    chosen: int | None  # index into rows; None: no cluster has a plan
    rows: tuple[ClusterRow, ...]
    reason: str


def cluster_row(name: str, request: SearchRequest, plan: ClusterPlan) -> ClusterRow:
    price = request.gpu_hour_price_usd if request.gpu_hour_price_usd is not None else request.cluster.gpu_hour_price_usd
    best = plan.result.best
    if best is None:
        return ClusterRow(name, False, None, None, None, None, None, None, None, price, None, None)
    prediction = best.evaluation.prediction
    num_gpus = best.parallel.num_gpus
    ttt = prediction.time_to_train_s
    batch = plan.batch.chosen_global_batch_size if plan.batch is not None else request.training.global_batch_size
    return ClusterRow(
        cluster=name,
        feasible=True,
        num_gpus=num_gpus,
        parallel=best.parallel,
        global_batch_size=batch,
        step_time_s=prediction.step_time_s,
        tokens_per_s=prediction.tokens_per_s,
        mfu=prediction.mfu,
        time_to_train_s=ttt,
        gpu_hour_price_usd=price,
        cost_usd=gpu_time_cost_usd(ttt, num_gpus, price) if ttt is not None and price is not None else None,
        objective_value=best.objective_value,
    )


_UNITS = {
    Objective.MAX_THROUGHPUT: ("time per token", "s/token"),
    Objective.MIN_TIME_TO_TRAIN: ("time to train", "s"),
    Objective.MIN_COST: ("cost", "USD"),
    Objective.MIN_GPUS: ("GPU count", "GPUs"),
}


def compare_clusters(objective: Objective, rows: Sequence[ClusterRow]) -> ClusterComparison:
    """The cluster whose best plan has the lowest objective value (ties: the one named first)
    and why, against the runner-up."""
    objective = Objective(objective)
    ranked = sorted((i for i, row in enumerate(rows) if row.objective_value is not None), key=lambda i: (rows[i].objective_value, i))
    what, unit = _UNITS[objective]
    if not ranked:
        return ClusterComparison(objective, None, tuple(rows), f"no plan fits on any of the {len(rows)} clusters")
    winner = rows[ranked[0]]
    reason = f"{winner.cluster} has the least {what}: {winner.objective_value:.4g} {unit}"
    if len(ranked) > 1:
        runner = rows[ranked[1]]
        reason += f" against {runner.objective_value:.4g} {unit} on {runner.cluster}"
        if objective is Objective.MIN_COST and winner.time_to_train_s and runner.time_to_train_s:
            reason += (
                f" (it trains in {winner.time_to_train_s:.4g} s on {winner.num_gpus} GPUs at {winner.gpu_hour_price_usd:g} USD/GPU-hour;"
                f" {runner.cluster}: {runner.time_to_train_s:.4g} s on {runner.num_gpus} GPUs at {runner.gpu_hour_price_usd:g})"
            )
        elif objective is Objective.MIN_TIME_TO_TRAIN and winner.tokens_per_s and runner.tokens_per_s:
            reason += f" ({winner.tokens_per_s:.4g} tokens/s on {winner.num_gpus} GPUs against {runner.tokens_per_s:.4g} on {runner.num_gpus})"
    infeasible = [row.cluster for row in rows if not row.feasible]
    if infeasible:
        reason += f"; nothing fits on {', '.join(infeasible)}"
    return ClusterComparison(objective, ranked[0], tuple(rows), reason)
