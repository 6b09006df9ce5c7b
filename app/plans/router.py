"""/v1/plans: search for plans, read, list and delete them, and export a candidate as a
framework's launch config."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.responses import JSONResponse

from app.core.deps import MetricsDep, SessionDep, SettingsDep, SolverPoolDep
from app.core.openapi import PROBLEM_RESPONSES, QUOTA_RESPONSES, SOLVER_RESPONSES
from app.jobs import service as jobs_service
from app.jobs.router import ACCEPTED_RESPONSE, PreferHeader, accepted, wants_async
from app.plans import service
from app.plans.schemas import ExportFormatName, Plan, PlanExport, PlanList, PlanRequest
from app.tokens.auth import ReadAccess, SolveAccess, WriteAccess

router = APIRouter(prefix="/v1/plans", tags=["plans"], responses=PROBLEM_RESPONSES)


@router.post(
    "",
    operation_id="create_plan",
    response_model=Plan,
    status_code=status.HTTP_201_CREATED,
    responses={
        200: {"model": Plan, "description": "This exact request was planned before: the stored plan"},
        **ACCEPTED_RESPONSE,
        **SOLVER_RESPONSES,
        **QUOTA_RESPONSES,
    },
)
def create_plan(
    body: PlanRequest,
    request: Request,
    response: Response,
    session: SessionDep,
    pool: SolverPoolDep,
    metrics: MetricsDep,
    settings: SettingsDep,
    access: SolveAccess,
    prefer: PreferHeader = None,
) -> Plan | JSONResponse:
    """Search for the best parallel configurations. An infeasible request is a result (status
    "infeasible" with an explanation), not an error. With `Prefer: respond-async` the search
    runs as a job (202, docs/jobs.md)."""
    if wants_async(prefer):
        return accepted(jobs_service.submit_plan(session, request.app.state.jobs, body, access))
    outcome = service.create_plan(
        session, pool, metrics, settings, request.app.state.versions, body, request.app.state.single_flight, access
    )
    try:
        session.commit()
    finally:
        outcome.release()
    response.headers["Location"] = f"/v1/plans/{outcome.document.id}"
    if not outcome.created:
        response.status_code = status.HTTP_200_OK
    return outcome.document


@router.get("", operation_id="list_plans", response_model=PlanList)
def list_plans(
    session: SessionDep,
    access: ReadAccess,
    model: Annotated[str | None, Query(description="only plans for this model name")] = None,
    cluster: Annotated[str | None, Query(description="only plans for this cluster name")] = None,
    plan_status: Annotated[
        Literal["succeeded", "infeasible"] | None, Query(alias="status", description="only plans with this status")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=service.MAX_PAGE_SIZE)] = 20,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
) -> PlanList:
    """Plans, newest first, a page at a time (with authentication on: the token's own; an
    admin's: everyone's)."""
    return service.list_plans(session, limit, cursor, model, cluster, plan_status, access)


@router.get("/{plan_id}", operation_id="get_plan", response_model=Plan)
def get_plan(plan_id: str, session: SessionDep, access: ReadAccess) -> Plan:
    return service.get_plan(session, plan_id, access)


@router.delete("/{plan_id}", operation_id="delete_plan", status_code=status.HTTP_204_NO_CONTENT)
def delete_plan(plan_id: str, session: SessionDep, access: WriteAccess) -> Response:
    service.delete_plan(session, plan_id, access)
    session.commit()
    return Response(status_code=status.HTTP_204_NO_CONTENT)


# The media types of the export's files, each served alone with ?file=NAME.
EXPORT_FILE_TYPES = ("text/x-shellscript", "application/toml", "application/yaml")


@router.get(
    "/{plan_id}/export",
    operation_id="export_plan",
    response_model=PlanExport,
    responses={
        200: {
            "description": "The launch config as JSON (every file, the differences from the plan and the"
            " exported configuration's prediction); with ?file=NAME, that file alone as its own media type"
            " (ds_config.json as application/json)",
            "content": {media: {"schema": {"type": "string"}} for media in EXPORT_FILE_TYPES},
        },
    },
)
def export_plan(
    plan_id: str,
    session: SessionDep,
    access: ReadAccess,
    export_format: Annotated[ExportFormatName, Query(alias="format", description="the framework")],
    candidate: Annotated[int, Query(ge=0, le=49, description="index into the plan's candidates; 0 is the best")] = 0,
    file: Annotated[
        str | None, Query(max_length=100, description="answer with this file of the export alone (e.g. ds_config.json)")
    ] = None,
) -> Response | PlanExport:
    """A plan candidate as a framework's launch config: Megatron-LM (``pretrain_gpt.py``
    arguments), DeepSpeed (``ds_config.json`` and a Megatron-DeepSpeed launch), torchtitan (job
    TOML) or NeMo (trainer/model overrides). ``exact`` is false when the framework cannot run the
    candidate as planned: the files then run the nearest configuration it can, and
    ``differences`` names every change."""
    document = service.export_candidate(session, plan_id, export_format, candidate, access)
    if file is None:
        return document
    chosen = service.export_file(document, file)
    return Response(content=chosen.content, media_type=chosen.media_type)
