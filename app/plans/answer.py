"""What a plan request is answered with, apart from storing it: the normalised request and its
hash, the search request, the stored plan's columns and the document the API answers.

``app.plans.service`` looks plans up and stores them; the command line without a database
(``partitura plan`` without ``--db``) answers from here alone (``plan_unstored``), the same
document without loading SQLAlchemy or FastAPI (issue 17: start-up is most of a CLI plan)."""

from __future__ import annotations

import functools
import hashlib
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from app.catalog.resolve import NO_CUSTOM_ENTRIES, CustomEntries, Resolved
from app.core.config import Settings
from app.core.problems import from_spec_error, invalid_field
from app.core.versions import Versions
from app.evaluations.training import check_num_gpus, error_band, resolve_training, training_spec, without_default_run_facts
from app.plans import choice, schemas
from solver.cost.profile import ModelProfile
from solver.search.loop import search
from solver.search.request import Constraints, Objective, SearchRequest
from solver.spec.errors import SpecError


def normalise(body: schemas.PlanRequest, time_budget_s: float, cluster_num_gpus: int | None) -> dict[str, Any]:
    """The request with defaults filled in and unset options dropped: equal requests are equal
    documents, whatever optional fields the client spelled out. A request that leaves
    ``num_gpus`` out plans on every GPU of the cluster unless a ``num_gpus`` constraint or the
    min_gpus objective asks for a range, so it is written with that count, as one that names it
    (``cluster_num_gpus`` None: the request names several clusters, each planned on all its GPUs)."""
    request = body.model_dump(mode="json", exclude_none=True)
    # The stack and every fact it sets, written out: the stored plan says what it assumed, and a
    # request naming the default stack equals one that leaves it out; likewise a run fact spelled
    # out at its default.
    request["training"] = without_default_run_facts(resolve_training(body.training).model_dump(mode="json", exclude_none=True))
    request["time_budget_s"] = time_budget_s
    request.setdefault("constraints", {})
    if cluster_num_gpus is None:
        return request
    if "num_gpus" not in request and "num_gpus" not in request["constraints"] and request.get("objective") != "min_gpus":
        request["num_gpus"] = cluster_num_gpus
    return request


def request_hash(request: dict[str, Any], snapshot: dict[str, Any], versions: Versions, owner: str | None = None) -> str:
    """SHA-256 over the normalised request, the catalog entries it resolved to and the solver
    version: the same question to the same solver gets the same stored answer. With an
    ``owner`` (authentication on: the token's id) the owner is hashed too, so identical requests
    of two owners are two plans (and two single-flight keys), never one owner's plan shown to
    the other; without one the hash is what it was before tokens existed."""
    document: dict[str, Any] = {"request": request, "catalog": snapshot, "solver": versions.solver, "ortools": versions.ortools}
    if owner is not None:
        document["owner"] = owner
    canonical = json.dumps(
        document,
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def search_request(
    body: schemas.PlanRequest, resolved: Resolved, time_budget_s: float, profile: ModelProfile | None
) -> SearchRequest:
    if body.num_gpus is not None:
        check_num_gpus(body.num_gpus, resolved.cluster)
    try:
        constraints = Constraints.parse(body.constraints.model_dump(exclude_none=True))
        return SearchRequest(
            model=resolved.model,
            cluster=resolved.cluster,
            training=training_spec(body.training),
            num_gpus=body.num_gpus,
            objective=Objective(body.objective),
            constraints=constraints,
            top_k=body.top_k,
            deadline_s=body.deadline_s,
            gpu_hour_price_usd=body.gpu_hour_price_usd,
            time_budget_s=time_budget_s,
            profile=profile,
            error_band=error_band(body.training, resolved.cluster, resolved.model),
        )
    except SpecError as error:
        raise from_spec_error(error, "body") from None


def plan_columns(
    request: dict[str, Any], resolved: Resolved, result: schemas.SearchOutcome, versions: Versions, digest: str,
    owner: str | None, choices: dict[str, Any] | None = None, created_at: datetime | None = None,
) -> dict[str, Any]:
    """The stored plan's columns (``app.plans.models.Plan``), a new id and ``created_at`` (now,
    UTC, unless given) included."""
    return {
        "id": str(uuid.uuid4()),
        "created_at": created_at or datetime.now(timezone.utc),
        "request_hash": digest,
        "status": result.status,
        "model_name": resolved.model.name,
        "cluster_name": resolved.cluster.name,
        "objective": request["objective"],
        "num_gpus": request.get("num_gpus") or resolved.cluster.num_gpus,
        "timed_out": result.search.timed_out,
        "request": request,
        "catalog_snapshot": resolved.snapshot,
        "solver_version": versions.solver,
        "ortools_version": versions.ortools,
        # The documents of a batch or cluster choice ride in the statistics' JSON (choice.CHOICE_KEYS).
        "search_stats": result.search.model_dump(mode="json") | (choices or {}),
        "explanation": result.explanation.model_dump(mode="json") if result.explanation is not None else None,
        "owner_token_id": owner,
    }


def candidate_columns(result: schemas.SearchOutcome) -> list[dict[str, Any]]:
    """Each candidate's stored columns (``app.plans.models.PlanCandidate``), best first."""
    return [
        {
            "rank": candidate.rank,
            "step_time_s": candidate.prediction.step_time_s,
            "tokens_per_s": candidate.prediction.tokens_per_s,
            "peak_memory_gib": candidate.memory.peak_gib,
            "parallel": candidate.parallel.model_dump(mode="json"),
            "document": candidate.model_dump(mode="json"),
        }
        for candidate in result.candidates
    ]


def document(plan: Mapping[str, Any], candidates: list[dict[str, Any]]) -> schemas.Plan:
    """The plan as the API answers it, from its columns and its candidates' documents (best
    first); a stored document that no longer matches the schema fails here, not in a client."""
    stats = {k: v for k, v in plan["search_stats"].items() if k not in choice.CHOICE_KEYS}
    choices = {k: v for k, v in plan["search_stats"].items() if k in choice.CHOICE_KEYS}
    return schemas.Plan.model_validate(
        {
            **choices,
            "id": plan["id"],
            "created_at": plan["created_at"],
            "status": plan["status"],
            "timed_out": plan["timed_out"],
            "request": plan["request"],
            "best": candidates[0] if candidates else None,
            "candidates": candidates,
            "search": stats,
            "explanation": plan["explanation"],
            "catalog_snapshot": plan["catalog_snapshot"],
            "versions": {"solver": plan["solver_version"], "ortools": plan["ortools_version"]},
        }
    )


def run_here(function: Callable[..., Any], args: tuple, timeout_s: float) -> Any:
    """``function(*args)`` in this thread (the search keeps its own time budget); a SpecError it
    raises is a 422 naming the field, as from the solver pool."""
    try:
        return function(*args)
    except SpecError as error:
        raise from_spec_error(error, "body") from None


# What the service finds of a measured profile for the resolved request (app.plans.service): the
# profile, and the resolution with the measurement in its snapshot.
Measured = Callable[[Resolved], tuple[ModelProfile, Resolved]]


@dataclass(frozen=True)
class Question:
    """A plan request made ready to answer: normalised, hashed, resolved, its search built."""

    request: dict[str, Any]  # normalised (``normalise``)
    digest: str  # ``request_hash``: the key the plan is stored under
    resolved: Resolved  # the request's (first) cluster and model
    job: SearchRequest | choice.Prepared  # one search, or the searches of a batch or cluster choice
    time_budget_s: float


def question(
    body: schemas.PlanRequest, settings: Settings, versions: Versions, custom: CustomEntries, owner: str | None = None,
    measured: Measured | None = None,
) -> Question:
    """``body`` resolved against the built-in catalog and ``custom`` entries, with the measured
    profile ``measured`` finds (None: analytic), normalised and hashed as ``owner``'s."""
    time_budget_s = min(body.time_budget_s or settings.plan_time_budget_s, settings.plan_time_budget_s)
    resolved = choice.resolve_first(custom, body)
    profile = None
    if measured is not None:
        profile, resolved = measured(resolved)
    build = functools.partial(search_request, body, time_budget_s=time_budget_s, profile=profile)
    if choice.needs_choice(body):
        job: SearchRequest | choice.Prepared = choice.prepare(custom, body, resolved, build)
        request = normalise(body, time_budget_s, None if job.several else resolved.cluster.num_gpus)
        return Question(request, request_hash(request, job.snapshot, versions, owner), resolved, job, time_budget_s)
    request = normalise(body, time_budget_s, resolved.cluster.num_gpus)
    return Question(request, request_hash(request, resolved.snapshot, versions, owner), resolved, build(resolved), time_budget_s)


def solve(asked: Question, run: choice.PoolRun) -> tuple[Resolved, schemas.SearchOutcome, dict[str, Any]]:
    """Run the question's search(es) through ``run`` (the solver pool, or ``run_here``): the
    resolution of the cluster planned on, its search outcome, and a choice's documents
    (``choice.CHOICE_KEYS``; empty without a choice)."""
    job = asked.job
    if isinstance(job, choice.Prepared):
        return choice.solve(job, run, job.requests[0].time_budget_s)
    result = run(search, (job,), job.time_budget_s)
    return asked.resolved, schemas.SearchOutcome.model_validate(result.to_dict()), {}


def plan_unstored(settings: Settings, versions: Versions, body: schemas.PlanRequest) -> schemas.Plan:
    """The plan the service would store for ``body``, computed without a database: names resolve
    to the built-in catalog (custom entries live in a database), the request hash is the one the
    service would store it under, and the document is the one it would answer."""
    if body.profile_id is not None:
        raise invalid_field("body.profile_id", "measured profiles are stored in a database: plan with --db to use one")
    asked = question(body, settings, versions, NO_CUSTOM_ENTRIES)
    resolved, result, choices = solve(asked, run_here)
    plan = plan_columns(asked.request, resolved, result, versions, asked.digest, None, choices)
    return document(plan, [c["document"] for c in candidate_columns(result)])
