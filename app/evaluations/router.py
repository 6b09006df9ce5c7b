"""/v1/evaluations: evaluate one configuration (nothing is stored)."""

from __future__ import annotations

from fastapi import APIRouter

from app.core.deps import SessionDep
from app.core.openapi import PROBLEM_RESPONSES
from app.evaluations import service
from app.evaluations.schemas import EvaluationOut, EvaluationRequest
from app.tokens.auth import WriteAccess

router = APIRouter(prefix="/v1/evaluations", tags=["evaluations"], responses=PROBLEM_RESPONSES)


@router.post("", operation_id="evaluate_configuration", response_model=EvaluationOut)
def evaluate_configuration(body: EvaluationRequest, session: SessionDep, access: WriteAccess) -> EvaluationOut:
    """Predict step time, throughput, MFU and memory of one parallel configuration."""
    return service.evaluate_configuration(session, body, access)
