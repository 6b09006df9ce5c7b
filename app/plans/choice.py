"""Plan requests the planner answers with a choice: the global batch size (``critical_batch``,
issue 15 part 3) and which of several clusters (a list of ``cluster`` names, part 5).

``prepare`` resolves every cluster and checks the batch settings (422s naming the field);
``solve`` runs all their searches as one job in the solver pool (``solver.search.clusters``)
and returns the winner's resolution and search outcome with the documents that explain the
choice (stored beside the search statistics, read back by ``plan_document``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.catalog.resolve import CustomEntries, Resolved, resolve
from app.core.problems import Problem, from_spec_error, invalid_field
from app.plans import schemas
from solver.search.request import Objective, SearchRequest
from solver.spec.errors import SpecError
from solver.spec.parallel import parallel_to_dict

# The batch choice and the cluster comparison (solver.batch, solver.search.clusters) are imported
# by the requests that choose: a plan of one cluster and batch, `partitura plan`'s usual
# question, starts without them (bench/cli.py).
if TYPE_CHECKING:
    from solver.batch.choose import BatchChoice, BatchRequest
    from solver.search.clusters import ClusterComparison, ClusterPlan

# Keys of the plan row's search_stats JSON that hold the choice's documents, not statistics.
CHOICE_KEYS = ("batch_choice", "cluster_comparison")
BATCH_OBJECTIVES = ("min_time_to_train", "min_cost")

# Runs a function in the solver pool: (function, args, timeout_s) -> its result.
PoolRun = Callable[[Callable[..., Any], tuple, float], Any]


@dataclass(frozen=True)
class Prepared:
    """Everything the job needs, resolved and checked."""

    names: tuple[str, ...]  # one per cluster, as the request names them
    resolved: tuple[Resolved, ...]
    requests: tuple[SearchRequest, ...]
    batch: BatchRequest | None
    several: bool  # the request named a list of clusters

    @property
    def snapshot(self) -> dict[str, Any]:
        """What the request hash covers: the one cluster's snapshot, or every cluster's."""
        if not self.several:
            return self.resolved[0].snapshot
        return {"clusters": [r.snapshot for r in self.resolved]}

    @property
    def searches(self) -> int:
        per_cluster = len(self.batch.global_batch_sizes) + 1 if self.batch is not None else 1
        return len(self.requests) * per_cluster


def needs_choice(body: schemas.PlanRequest) -> bool:
    return isinstance(body.cluster, list) or body.critical_batch is not None


def _batch_request(body: schemas.PlanRequest) -> BatchRequest | None:
    given = body.critical_batch
    if given is None:
        return None
    if body.objective not in BATCH_OBJECTIVES:
        raise invalid_field("body.objective", "choosing the batch (critical_batch) needs min_time_to_train or min_cost")
    if body.training.train_tokens is not None:
        raise invalid_field(
            "body.training.train_tokens", "give train_tokens or critical_batch (which sets the tokens each batch needs), not both"
        )
    from solver.batch.choose import BatchRequest, candidate_batches
    from solver.batch.noise import NoiseScale

    bounds = given.global_batch_size
    try:
        noise = NoiseScale.given(given.min_tokens, given.noise_scale_tokens, given.target_loss)
        sizes = candidate_batches(
            body.training.global_batch_size, bounds.min if bounds else None, bounds.max if bounds else None
        )
    except SpecError as error:
        raise from_spec_error(error, "body") from None
    return BatchRequest(noise, sizes)


def _resolve_named(custom: CustomEntries, body: schemas.PlanRequest, index: int, name: str) -> Resolved:
    try:
        return resolve(custom, body.model, name, body.num_gpus)
    except Problem as problem:
        if problem.status == 422 and problem.errors and problem.errors[0]["field"] == "body.cluster":
            raise invalid_field(f"body.cluster.{index}", problem.errors[0]["reason"], problem.suggestions) from None
        raise


def resolve_first(custom: CustomEntries, body: schemas.PlanRequest) -> Resolved:
    """The request's cluster resolved, or the first of its list (a 422 naming ``body.cluster.0``
    if unknown); a list with a measured profile is a 422 naming ``body.profile_id``."""
    if not isinstance(body.cluster, list):
        return resolve(custom, body.model, body.cluster, body.num_gpus)
    if body.profile_id is not None:
        raise invalid_field("body.profile_id", "a measured profile is of one GPU type: name one cluster to plan from it")
    return _resolve_named(custom, body, 0, body.cluster[0])


def prepare(
    custom: CustomEntries, body: schemas.PlanRequest, single: Resolved, build: Callable[[Resolved], SearchRequest]
) -> Prepared:
    """Resolve and check a choosing request; ``single`` is the request's one cluster already
    resolved (with its measured profile), used when it names one cluster."""
    batch = _batch_request(body)
    if not isinstance(body.cluster, list):
        return Prepared((single.cluster.name,), (single,), (build(single),), batch, several=False)
    if len(set(body.cluster)) != len(body.cluster):
        raise invalid_field("body.cluster", "a cluster is named twice")
    resolved = (single, *(_resolve_named(custom, body, i, name) for i, name in enumerate(body.cluster) if i > 0))
    requests = []
    for index, item in enumerate(resolved):
        try:
            requests.append(build(item))
        except Problem as problem:
            if problem.status == 422 and problem.errors and problem.errors[0]["field"] == "body.num_gpus":
                reason = f"{problem.errors[0]['reason']} (cluster {index}, {body.cluster[index]})"
                raise invalid_field("body.num_gpus", reason) from None
            raise
    return Prepared(tuple(body.cluster), resolved, tuple(requests), batch, several=True)


def _batch_document(choice: BatchChoice) -> dict[str, Any]:
    noise = choice.noise
    return {
        "noise_scale_tokens": noise.noise_scale_tokens,
        "noise_scale_source": noise.source.value,
        "target_loss": noise.target_loss,
        "min_tokens": noise.min_tokens,
        "min_steps": noise.min_steps,
        "reference_global_batch_size": choice.reference_global_batch_size,
        "chosen_global_batch_size": choice.chosen_global_batch_size,
        "points": [
            {
                "global_batch_size": p.global_batch_size,
                "tokens_per_step": p.cost.batch_tokens,
                "status": "succeeded" if p.parallel is not None else "infeasible",
                "steps": p.cost.steps,
                "min_steps": p.cost.min_steps,
                "tokens": p.cost.tokens,
                "extra_tokens": p.cost.extra_tokens,
                "num_gpus": p.num_gpus,
                "parallel": parallel_to_dict(p.parallel) if p.parallel is not None else None,
                "step_time_s": p.step_time_s,
                "tokens_per_s": p.tokens_per_s,
                "time_to_train_s": p.time_to_train_s,
                "time_for_min_tokens_s": p.time_for_min_tokens_s,
                "time_for_extra_tokens_s": p.time_for_extra_tokens_s,
                "cost_usd": p.cost_usd,
                "objective_value": p.objective_value,
            }
            for p in choice.points
        ],
        "summary": choice.summary,
    }


def _comparison_document(comparison: ClusterComparison, plans: list[ClusterPlan]) -> dict[str, Any]:
    rows = []
    for row, plan in zip(comparison.rows, plans):
        best = plan.result.best
        explanation = plan.result.explanation
        summary = best.why if best is not None else (explanation.summary if explanation is not None else "no plan fits")
        rows.append({
            "cluster": row.cluster,
            "status": "succeeded" if row.feasible else "infeasible",
            "num_gpus": row.num_gpus,
            "parallel": parallel_to_dict(row.parallel) if row.parallel is not None else None,
            "global_batch_size": row.global_batch_size,
            "step_time_s": row.step_time_s,
            "tokens_per_s": row.tokens_per_s,
            "mfu": row.mfu,
            "time_to_train_s": row.time_to_train_s,
            "gpu_hour_price_usd": row.gpu_hour_price_usd,
            "cost_usd": row.cost_usd,
            "objective_value": row.objective_value,
            "summary": summary,
        })
    chosen = comparison.rows[comparison.chosen].cluster if comparison.chosen is not None else None
    return {"objective": comparison.objective.value, "chosen_cluster": chosen, "reason": comparison.reason, "clusters": rows}


def solve(prepared: Prepared, run: PoolRun, time_budget_s: float) -> tuple[Resolved, schemas.SearchOutcome, dict[str, Any]]:
    """Every search of the request as one solver job; the winning cluster's resolution and
    search outcome, and the choice's documents (``CHOICE_KEYS``)."""
    from solver.search.clusters import cluster_row, compare_clusters, plan_clusters

    plans: list[ClusterPlan] = run(plan_clusters, (list(prepared.requests), prepared.batch), time_budget_s * prepared.searches)
    extras: dict[str, Any] = {}
    index = 0
    if prepared.several:
        objective = Objective(prepared.requests[0].objective)
        rows = [cluster_row(name, request, plan) for name, request, plan in zip(prepared.names, prepared.requests, plans)]
        comparison = compare_clusters(objective, rows)
        index = comparison.chosen if comparison.chosen is not None else 0
        extras["cluster_comparison"] = _comparison_document(comparison, plans)
    winner = plans[index]
    if winner.batch is not None:
        extras["batch_choice"] = _batch_document(winner.batch)
    return prepared.resolved[index], schemas.SearchOutcome.model_validate(winner.result.to_dict()), extras
