"""/v1/sizing: the compute-optimal model for a budget, or the tokens for a model."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from app.core.deps import MetricsDep, SessionDep, SettingsDep, SolverPoolDep
from app.core.openapi import PROBLEM_RESPONSES, QUOTA_RESPONSES, SOLVER_RESPONSES
from app.sizing import service
from app.sizing.schemas import Sizing, SizingRequest
from app.tokens.auth import SolveAccess

router = APIRouter(prefix="/v1/sizing", tags=["sizing"], responses=PROBLEM_RESPONSES)


@router.post("", operation_id="create_sizing", response_model=Sizing, status_code=status.HTTP_201_CREATED, responses={**SOLVER_RESPONSES, **QUOTA_RESPONSES})
def create_sizing(
    body: SizingRequest,
    request: Request,
    response: Response,
    session: SessionDep,
    pool: SolverPoolDep,
    metrics: MetricsDep,
    settings: SettingsDep,
    access: SolveAccess,
) -> Sizing:
    """Size a model (Hoffmann et al. 2022) and store the plan that trains it; 201 with the
    plan's ``Location``. A model that fits nowhere is a result (status "infeasible")."""
    document, release = service.create_sizing(
        session, pool, metrics, settings, request.app.state.versions, body, request.app.state.single_flight, access
    )
    try:
        session.commit()
    finally:
        release()
    if document.plan_id is not None:
        response.headers["Location"] = f"/v1/plans/{document.plan_id}"
    return document
