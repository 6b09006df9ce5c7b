"""Plans: resolve and normalise a request, search in the solver pool, store idempotently."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.catalog.resolve import Resolved
from app.catalog.service import SessionEntries
from app.core.config import Settings
from app.core.db import utc_now
from app.core.metrics import Metrics
from app.core.ownership import ANYONE, Access
from app.core.pagination import decode_cursor, encode_cursor
from app.core.problems import Problem, from_spec_error, invalid_field, not_found
from app.core.single_flight import SingleFlight
from app.core.solver_pool import InlineSolver, SolverPool, SolverSaturated, SolverUnavailable
from app.core.versions import Versions
from app.evaluations.training import training_spec
from app.plans import answer, repository, schemas
from app.plans.models import Plan, PlanCandidate
from app.profiles.service import measured_profile
from catalog.conversion import cluster_spec_on_gpu, gpu_spec_from_dict, model_spec_from_dict
from solver.cost.evaluate import evaluate
from solver.cost.profile import ModelProfile
from solver.frameworks import (
    FRAMEWORK_RULES,
    Export,
    ExportFormat,
    PlanToExport,
    export_mechanics,
    export_plan,
    export_violations,
)
from solver.io.profile_format import parse_profile_document, profile_document
from solver.spec.errors import SpecError
from solver.spec.model import ModelSpec
from solver.spec.parallel import parallel_from_dict, parallel_to_dict

MAX_PAGE_SIZE = 100
# The plan's columns its document is built from (answer.document).
PLAN_DOCUMENT_COLUMNS = (
    "id", "created_at", "status", "timed_out", "request", "search_stats", "explanation", "catalog_snapshot",
    "solver_version", "ortools_version",
)


def _nothing_to_release() -> None:
    """The release of an outcome no other request waits for."""


@dataclass(frozen=True)
class PlanOutcome:
    document: schemas.Plan
    created: bool  # False: an identical request was planned before; this is the stored plan
    # Wakes identical requests waiting for this one; the caller calls it once the plan is committed.
    release: Callable[[], None] = _nothing_to_release


def _plan_row(
    request: dict[str, Any], resolved: Resolved, result: schemas.SearchOutcome, versions: Versions, digest: str,
    owner: str | None, choices: dict[str, Any] | None = None,
) -> Plan:
    plan = Plan(**answer.plan_columns(request, resolved, result, versions, digest, owner, choices, utc_now()))
    for columns in answer.candidate_columns(result):
        plan.candidates.append(PlanCandidate(**columns))
    return plan


def plan_document(plan: Plan) -> schemas.Plan:
    """The stored plan as the API answers it (``answer.document``)."""
    columns = {name: getattr(plan, name) for name in PLAN_DOCUMENT_COLUMNS}
    return answer.document(columns, [c.document for c in sorted(plan.candidates, key=lambda c: c.rank)])


def _run_in_pool(
    pool: SolverPool | InlineSolver, metrics: Metrics, settings: Settings, function: Callable[..., Any], args: tuple,
    time_budget_s: float,
) -> Any:
    """``function(*args)`` in the solver pool, given ``time_budget_s`` plus the grace; busy,
    overrun and invalid requests answered as problems."""
    started_s = time.perf_counter()
    try:
        result = pool.run(function, *args, timeout_s=time_budget_s + settings.solver_grace_s)
    except SolverSaturated as busy:
        metrics.solver_rejections.inc()
        raise Problem(
            503, "Solver busy", f"all {pool.capacity} solver slots are taken; retry in {busy.retry_after_s} s",
            slug="solver-saturated", headers={"Retry-After": str(busy.retry_after_s)},
        ) from None
    except SolverUnavailable as error:
        metrics.solve_duration_s.labels(outcome="unavailable").observe(time.perf_counter() - started_s)
        raise Problem(
            503, "Solver unavailable", str(error), slug="solver-unavailable",
            headers={"Retry-After": str(pool.retry_after())},
        ) from None
    except SpecError as error:
        metrics.solve_duration_s.labels(outcome="invalid").observe(time.perf_counter() - started_s)
        raise from_spec_error(error, "body") from None
    status = result.status if hasattr(result, "status") else "succeeded"
    metrics.solve_duration_s.labels(outcome=status).observe(time.perf_counter() - started_s)
    return result


def create_plan(
    session: Session,
    pool: SolverPool | InlineSolver,
    metrics: Metrics,
    settings: Settings,
    versions: Versions,
    body: schemas.PlanRequest,
    flights: SingleFlight | None = None,
    access: Access = ANYONE,
) -> PlanOutcome:
    """Answer a plan request: the stored plan if this exact request was planned before (by the
    same owner: ``access.owner`` is part of the request hash), otherwise search and store,
    owned by ``access.owner``. Leaves the new plan flushed, for the caller to commit and then to
    call ``release``. With ``flights``, an identical request already searching in this process
    is awaited instead of searched again."""

    def measured(resolved: Resolved) -> tuple[ModelProfile, Resolved]:
        document = measured_profile(session, str(body.profile_id), resolved.model, access=access)
        # The measurement is part of what the plan was computed from: snapshot it too.
        snapshot = {**resolved.snapshot, "profile": {"id": body.profile_id, "document": profile_document(document)}}
        return document.profile, replace(resolved, snapshot=snapshot)

    asked = answer.question(
        body, settings, versions, SessionEntries(session), access.owner, measured if body.profile_id is not None else None
    )
    digest = asked.digest
    stored = repository.get_by_hash(session, digest)
    if stored is not None:
        return PlanOutcome(plan_document(stored), created=False)
    # End the read transaction before the search: no lock or connection is held while solving.
    session.rollback()

    release = _nothing_to_release
    if flights is not None:
        leader, event = flights.join(digest)
        if not leader:
            event.wait(timeout=asked.time_budget_s + settings.solver_grace_s)
            session.rollback()  # a fresh snapshot, which holds the leader's plan
            stored = repository.get_by_hash(session, digest)
            if stored is not None:
                metrics.plan_requests_coalesced.inc()
                return PlanOutcome(plan_document(stored), created=False)
            # The leader failed (or is still running past its budget): search for this one.
        else:
            release = functools.partial(flights.release, digest, event)
    try:
        return _search_and_add(session, pool, metrics, settings, versions, asked, release, access.owner)
    except BaseException:
        release()
        raise


def _search_and_add(
    session: Session, pool: SolverPool | InlineSolver, metrics: Metrics, settings: Settings, versions: Versions,
    asked: answer.Question, release: Callable[[], None], owner: str | None,
) -> PlanOutcome:
    resolved, result, choices = answer.solve(asked, functools.partial(_run_in_pool, pool, metrics, settings))
    digest = asked.digest
    plan = _plan_row(asked.request, resolved, result, versions, digest, owner, choices)
    try:
        repository.add(session, plan)
    except IntegrityError:
        # An identical request stored its plan while this one was solving: answer with that one.
        session.rollback()
        stored = repository.get_by_hash(session, digest)
        if stored is None:
            raise
        metrics.plan_insert_races.inc()
        return PlanOutcome(plan_document(stored), created=False, release=release)
    metrics.plans_created.labels(status=plan.status).inc()
    return PlanOutcome(plan_document(plan), created=True, release=release)


def _unknown_plan(plan_id: str) -> Problem:
    """A 404; another owner's plan is answered exactly as an unknown one. Plan ids are opaque:
    the 404 suggests none (a prefix search would hand out ids to whoever asks, issue 17)."""
    return not_found("plan", plan_id)


def get_plan(session: Session, plan_id: str, access: Access = ANYONE) -> schemas.Plan:
    plan = repository.get(session, plan_id, access)
    if plan is None:
        raise _unknown_plan(plan_id)
    return plan_document(plan)


def delete_plan(session: Session, plan_id: str, access: Access = ANYONE) -> None:
    plan = repository.get(session, plan_id, access)
    if plan is None:
        raise _unknown_plan(plan_id)
    repository.delete(session, plan)


def list_plans(
    session: Session, limit: int, cursor: str | None, model: str | None, cluster: str | None, status: str | None,
    access: Access = ANYONE,
) -> schemas.PlanList:
    after = decode_cursor(cursor) if cursor else None
    rows = repository.page(session, limit + 1, after, model=model, cluster=cluster, status=status, access=access)
    page, more = rows[:limit], len(rows) > limit
    best = repository.best_candidates(session, [plan.id for plan in page])
    items = [
        {
            "id": plan.id,
            "created_at": plan.created_at,
            "status": plan.status,
            "model": plan.model_name,
            "cluster": plan.cluster_name,
            "objective": plan.objective,
            "num_gpus": plan.num_gpus,
            "timed_out": plan.timed_out,
            "best_parallel": best.get(plan.id, {}).get("parallel"),
            "best_tokens_per_s": best.get(plan.id, {}).get("tokens_per_s"),
        }
        for plan in page
    ]
    return schemas.PlanList.model_validate({"items": items, "next_cursor": encode_cursor(page[-1]) if more else None})


def export_candidate(
    session: Session, plan_id: str, export_format: str, candidate: int, access: Access = ANYONE
) -> schemas.PlanExport:
    """Candidate ``candidate`` (0: the best) of a stored plan as ``export_format``'s launch
    config (``solver.frameworks``), with the exported configuration's prediction: the plan's
    own when the export is exact, else the nearest configuration evaluated on the plan's
    snapshot (model, cluster, GPU and measured profile as they were planned)."""
    if candidate < 0:
        raise invalid_field("query.candidate", "must be at least 0 (0 is the best)")
    plan = repository.get(session, plan_id, access)
    if plan is None:
        raise _unknown_plan(plan_id)
    document = plan_document(plan)
    session.rollback()  # the read is over: release the connection before computing
    if candidate >= len(document.candidates):
        reason = (
            "the plan is infeasible and has no candidates" if not document.candidates
            else f"the plan has {len(document.candidates)} candidates: 0 to {len(document.candidates) - 1}"
        )
        raise Problem(
            404, "Unknown candidate", f"query.candidate: {reason}", slug="not-found",
            errors=[{"field": "query.candidate", "reason": reason}],
        )
    chosen = document.candidates[candidate]
    snapshot = plan.catalog_snapshot  # the entries exactly as the plan resolved them
    model = model_spec_from_dict(snapshot["model"]["entry"])
    cluster_entry = snapshot["cluster"]["entry"]
    parallel = parallel_from_dict(chosen.parallel.model_dump())
    training = training_spec(document.request.training)
    chosen_batch = (plan.search_stats.get("batch_choice") or {}).get("chosen_global_batch_size")
    if chosen_batch is not None:  # the candidates run at the batch the planner chose (critical_batch)
        training = replace(training, global_batch_size=chosen_batch)
    export = export_plan(PlanToExport(model, training, parallel, cluster_entry["gpus_per_node"]), ExportFormat(export_format))
    prediction = _exported_prediction(snapshot, model, cluster_entry, export, ExportFormat(export_format))
    return schemas.PlanExport.model_validate({
        "plan_id": plan.id,
        "candidate": candidate,
        "format": export_format,
        "exact": export.exact,
        "parallel": parallel_to_dict(export.parallel),
        "differences": [vars(d) for d in export.differences],
        "files": [{"name": f.name, "media_type": f.media_type, "content": f.text} for f in export.files],
        "notes": list(export.notes),
        "prediction": prediction,
    })


def _exported_prediction(
    snapshot: dict[str, Any], model: ModelSpec, cluster_entry: dict[str, Any], export: Export, export_format: ExportFormat,
) -> schemas.ExportPrediction | None:
    """What the export's files run, evaluated on the plan's own snapshot (GPU, cluster and
    measured profile as planned) with its framework's mechanics, and judged by that framework's
    own rules instead of the 'any' ones."""
    cluster = cluster_spec_on_gpu(cluster_entry, gpu_spec_from_dict(snapshot["gpu"]["entry"]))
    profile = None
    if "profile" in snapshot:
        try:
            profile = parse_profile_document(snapshot["profile"]["document"]).profile
        except SpecError:
            return None
    parallel = export.parallel
    result = evaluate(
        model, cluster, export.training, parallel, num_gpus=parallel.num_gpus, profile=profile,
        framework=export_mechanics(export_format),
    )
    violations = [v for v in result.violations if v.rule not in FRAMEWORK_RULES] + export_violations(parallel, export_format)
    out = result.to_dict()
    return schemas.ExportPrediction(
        feasible=not violations, violations=[str(v) for v in violations],
        step_time_s=out["prediction"]["step_time_s"], tokens_per_s=out["prediction"]["tokens_per_s"],
        peak_memory_gib=out["memory"]["peak_gib"],
    )


def export_file(export: schemas.PlanExport, name: str) -> schemas.ExportFile:
    """One file of an export by name; a 404 naming ``query.file`` and the files there are."""
    for file in export.files:
        if file.name == name:
            return file
    names = [f.name for f in export.files]
    reason = f"the {export.format} export has {', '.join(names)}"
    raise Problem(
        404, "Unknown file", f"query.file: {reason}", slug="not-found",
        errors=[{"field": "query.file", "reason": reason}], suggestions=names,
    )
