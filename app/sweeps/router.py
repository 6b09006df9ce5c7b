"""/v1/sweeps: plan a grid of GPU counts, clusters and batch sizes; read it; chart it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response, status
from fastapi.responses import JSONResponse

from app.core.deps import MetricsDep, SessionDep, SettingsDep, SolverPoolDep
from app.core.openapi import PROBLEM_RESPONSES, QUOTA_RESPONSES, SOLVER_RESPONSES
from app.jobs import service as jobs_service
from app.jobs.router import ACCEPTED_RESPONSE, PreferHeader, accepted, wants_async
from app.sweeps import service
from app.sweeps.schemas import Sweep, SweepRequest
from app.tokens.auth import ReadAccess, SolveAccess

router = APIRouter(prefix="/v1/sweeps", tags=["sweeps"], responses=PROBLEM_RESPONSES)

SVG_MEDIA_TYPE = "image/svg+xml"


class SvgResponse(Response):
    media_type = SVG_MEDIA_TYPE


SVG_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {"description": "A standalone SVG chart (no script)", "content": {SVG_MEDIA_TYPE: {"schema": {"type": "string"}}}}
}


@router.post(
    "",
    operation_id="create_sweep",
    response_model=Sweep,
    status_code=status.HTTP_201_CREATED,
    responses={**ACCEPTED_RESPONSE, **SOLVER_RESPONSES, **QUOTA_RESPONSES},
)
def create_sweep(
    body: SweepRequest,
    request: Request,
    response: Response,
    session: SessionDep,
    pool: SolverPoolDep,
    metrics: MetricsDep,
    settings: SettingsDep,
    access: SolveAccess,
    prefer: PreferHeader = None,
) -> Sweep | JSONResponse:
    """Plan every point of the grid (each point's best plan is stored as an ordinary plan and
    linked), then fit the scaling curves and find the Pareto front. Runs within the request
    (201), or with `Prefer: respond-async` as a job (202, docs/jobs.md); an infeasible point is
    a result, not an error."""
    if wants_async(prefer):
        return accepted(jobs_service.submit_sweep(session, request.app.state.jobs, body, access))
    document = service.create_sweep(
        session, request.app.state.sessionmaker, pool, metrics, settings, request.app.state.versions, body,
        request.app.state.single_flight, access,
    )
    session.commit()
    response.headers["Location"] = f"/v1/sweeps/{document.id}"
    return document


@router.get("/{sweep_id}", operation_id="get_sweep", response_model=Sweep)
def get_sweep(sweep_id: str, session: SessionDep, access: ReadAccess) -> Sweep:
    return service.get_sweep(session, sweep_id, access)


@router.get(
    "/{sweep_id}/charts/scaling.svg", operation_id="get_sweep_scaling_chart", response_class=SvgResponse,
    responses=SVG_RESPONSE,
)
def scaling_chart(sweep_id: str, session: SessionDep, access: ReadAccess) -> SvgResponse:
    """Time to train against GPUs (log-log), per cluster, with the fitted power laws."""
    return SvgResponse(service.scaling_svg(session, sweep_id, access))


@router.get(
    "/{sweep_id}/charts/pareto.svg", operation_id="get_sweep_pareto_chart", response_class=SvgResponse,
    responses=SVG_RESPONSE,
)
def pareto_chart(sweep_id: str, session: SessionDep, access: ReadAccess) -> SvgResponse:
    """Cost against time to train of every priced point, with the Pareto front."""
    return SvgResponse(service.pareto_svg(session, sweep_id, access))
