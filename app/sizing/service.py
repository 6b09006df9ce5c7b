"""Sizing: turn the budget into GPU-seconds on the request's GPUs, size (and plan) the model in
the solver pool (``solver.sizing``), then store its plan as an ordinary plan."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.orm import Session

from app.catalog.schemas import ModelSpecIn
from app.catalog.service import resolve
from app.core.config import Settings
from app.core.metrics import Metrics
from app.core.ownership import ANYONE, Access
from app.core.problems import Problem, from_spec_error, invalid_field
from app.core.single_flight import SingleFlight
from app.core.solver_pool import InlineSolver, SolverPool, SolverSaturated, SolverUnavailable
from app.core.versions import Versions
from app.evaluations.schemas import Training
from app.evaluations.training import check_num_gpus, training_spec
from app.plans import service as plans_service
from app.plans.schemas import PlanRequest
from app.sizing import schemas
from app.sweeps.service import catalog_price
from solver.search.request import Constraints, SearchRequest
from solver.sizing.budget import MAX_ITERATIONS, SizedPlan, size_model, size_to_budget
from solver.sizing.chinchilla import SizingRule
from solver.spec.errors import SpecError

SECONDS_PER_HOUR = 3600.0


def _nothing_to_release() -> None:
    """The release of a sizing that stored no plan."""


def _check(body: schemas.SizingRequest) -> None:
    if (body.model is None) == (body.budget is None):
        raise invalid_field("body.budget", "give a budget (to size a model) or a model (to size its tokens), not both or neither")
    if body.budget is not None:
        given = [k for k, v in body.budget.model_dump(exclude_none=True).items() if v is not None]
        if len(given) != 1:
            raise invalid_field("body.budget", "give exactly one of gpu_hours, usd and deadline_s")
    if body.training.train_tokens is not None:
        raise invalid_field("body.training.train_tokens", "sizing chooses the tokens; leave train_tokens out")
    if body.constraints.model_dump(exclude_none=True).get("num_gpus") is not None:
        raise invalid_field("body.constraints.num_gpus", "sizing plans on num_gpus GPUs; give it as num_gpus")


def _budget_gpu_seconds(budget: schemas.Budget, num_gpus: int, price_usd: float | None) -> float:
    if budget.gpu_hours is not None:
        return budget.gpu_hours * SECONDS_PER_HOUR
    if budget.usd is not None:
        if price_usd is None:
            raise invalid_field("body.budget.usd", "the cluster has no GPU-hour price; give gpu_hour_price_usd")
        return budget.usd / price_usd * SECONDS_PER_HOUR
    if budget.deadline_s is None:
        raise invalid_field("body.budget", "give exactly one of gpu_hours, usd and deadline_s")
    return budget.deadline_s * num_gpus


def _run(pool: SolverPool | InlineSolver, settings: Settings, function, *args, timeout_s: float) -> SizedPlan:
    """Run a sizing in the solver pool; its errors as the plans service answers them."""
    try:
        return pool.run(function, *args, timeout_s=timeout_s)
    except SolverSaturated as busy:
        raise Problem(
            503, "Solver busy", f"all {pool.capacity} solver slots are taken; retry in {busy.retry_after_s} s",
            slug="solver-saturated", headers={"Retry-After": str(busy.retry_after_s)},
        ) from None
    except SolverUnavailable as error:
        raise Problem(503, "Solver unavailable", str(error), slug="solver-unavailable", headers={"Retry-After": str(pool.retry_after())}) from None
    except SpecError as error:
        raise from_spec_error(error, "body") from None


def _model_in(sized: SizedPlan) -> ModelSpecIn:
    model = sized.model
    return ModelSpecIn(
        name=model.name, num_layers=model.num_layers, hidden_size=model.hidden_size, num_attention_heads=model.num_attention_heads,
        num_kv_heads=model.num_kv_heads, ffn_hidden_size=model.ffn_hidden_size, vocab_size=model.vocab_size,
        seq_length=model.seq_length, mlp_activation=model.mlp_activation.value, tied_embeddings=model.tied_embeddings,
        architecture=model.architecture.value, position_embedding=model.position_embedding.value,
    )


def create_sizing(
    session: Session,
    pool: SolverPool | InlineSolver,
    metrics: Metrics,
    settings: Settings,
    versions: Versions,
    body: schemas.SizingRequest,
    flights: SingleFlight | None = None,
    access: Access = ANYONE,
) -> tuple[schemas.Sizing, Callable[[], None]]:
    """Size and plan; the plan (owned by ``access.owner``) is flushed in ``session`` for the
    caller to commit and then to call the returned release (which wakes identical plan requests
    waiting for it)."""
    _check(body)
    time_budget_s = min(body.time_budget_s or settings.plan_time_budget_s, settings.plan_time_budget_s)
    try:
        resolved = resolve(session, body.model or body.family, body.cluster, body.num_gpus)
    except Problem as problem:
        if body.model is None and problem.errors and problem.errors[0]["field"] == "body.model":
            raise invalid_field("body.family", problem.errors[0]["reason"], problem.suggestions) from None
        raise
    num_gpus = check_num_gpus(body.num_gpus, resolved.cluster)
    catalog_usd, _source, borrowed = catalog_price(session, body.cluster)
    price_usd = body.gpu_hour_price_usd if body.gpu_hour_price_usd is not None else catalog_usd
    try:
        request = SearchRequest(
            model=resolved.model, cluster=resolved.cluster, training=training_spec(body.training), num_gpus=num_gpus,
            constraints=Constraints.parse(body.constraints.model_dump(exclude_none=True)), top_k=1, time_budget_s=time_budget_s,
        )
    except SpecError as error:
        raise from_spec_error(error, "body") from None
    rule = SizingRule(body.rule)
    session.rollback()  # no transaction is held while sizing
    budget_gpu_s = None
    if body.budget is not None:
        budget_gpu_s = _budget_gpu_seconds(body.budget, num_gpus, price_usd)
        name = f"{body.family}-family-optimal"
        sized = _run(
            pool, settings, size_to_budget, request, budget_gpu_s, rule, body.tokens_per_parameter, name,
            timeout_s=time_budget_s * (MAX_ITERATIONS + 1) + settings.solver_grace_s,
        )
    else:
        sized = _run(pool, settings, size_model, request, rule, body.tokens_per_parameter,
                     timeout_s=time_budget_s + settings.solver_grace_s)
    plan, release = None, _nothing_to_release
    if sized.fits:
        training = Training.model_validate({**body.training.model_dump(exclude_none=True), "train_tokens": sized.tokens})
        plan_request = PlanRequest(
            model=body.model if body.model is not None else _model_in(sized),
            cluster=body.cluster, num_gpus=num_gpus, training=training, objective="min_time_to_train",
            constraints=body.constraints, top_k=1, deadline_s=None,
            gpu_hour_price_usd=body.gpu_hour_price_usd if body.gpu_hour_price_usd is not None else (catalog_usd if borrowed else None),
            time_budget_s=body.time_budget_s, profile_id=None,
        )
        outcome = plans_service.create_plan(session, pool, metrics, settings, versions, plan_request, flights, access)
        plan, release = outcome.document, outcome.release
    return _document(body, sized, plan, num_gpus, price_usd, budget_gpu_s), release


def _document(
    body: schemas.SizingRequest, sized: SizedPlan, plan, num_gpus: int, price_usd: float | None, budget_gpu_s: float | None
) -> schemas.Sizing:
    best = plan.best if plan is not None else None
    time_s = best.prediction.time_to_train_s if best is not None else None
    gpu_hours = None if time_s is None else time_s * num_gpus / SECONDS_PER_HOUR
    within = None if budget_gpu_s is None or gpu_hours is None else gpu_hours * SECONDS_PER_HOUR <= budget_gpu_s * (1 + 1e-9)
    model = sized.model
    if best is None:
        note = "no split of the sized model fits the cluster" + (f": {plan.explanation.summary}" if plan and plan.explanation else "")
    elif budget_gpu_s is None or gpu_hours is None:
        note = f"{body.model} should see {sized.tokens:.3g} tokens ({sized.tokens / sized.parameters:.1f} per parameter)"
    else:
        note = (
            f"{sized.parameters / 1e9:.1f}B parameters on {sized.tokens / 1e12:.2f}T tokens use "
            f"{gpu_hours / (budget_gpu_s / SECONDS_PER_HOUR):.1%} of the budget"
        )
    return schemas.Sizing.model_validate(
        {
            "mode": "budget" if budget_gpu_s is not None else "model",
            "rule": body.rule,
            "optimal_parameters": sized.optimum.parameters,
            "optimal_tokens": sized.optimum.tokens,
            "model": {
                "name": model.name, "num_layers": model.num_layers, "hidden_size": model.hidden_size,
                "num_attention_heads": model.num_attention_heads, "num_kv_heads": model.num_kv_heads,
                "ffn_hidden_size": model.ffn_hidden_size, "vocab_size": model.vocab_size, "seq_length": model.seq_length,
                "mlp_activation": model.mlp_activation.value, "parameters": sized.parameters,
            },
            "tokens": sized.tokens,
            "compute_flops": 6 * sized.parameters * sized.tokens,
            "predicted_loss": sized.predicted_loss,
            "status": "succeeded" if best is not None else "infeasible",
            "plan_id": plan.id if plan is not None else None,
            "parallel": best.parallel.model_dump(mode="json") if best is not None else None,
            "num_gpus": num_gpus,
            "time_to_train_s": time_s,
            "gpu_hours": gpu_hours,
            "gpu_hour_price_usd": price_usd,
            "cost_usd": None if gpu_hours is None or price_usd is None else gpu_hours * price_usd,
            "mfu": best.prediction.mfu if best is not None else None,
            "budget_gpu_hours": None if budget_gpu_s is None else budget_gpu_s / SECONDS_PER_HOUR,
            "within_budget": within,
            "iterations": sized.iterations,
            "note": note,
        }
    )
