"""/v1/jobs: poll a job (a sweep, or a plan asked with ``Prefer: respond-async``) and cancel it.
``accepted`` is how the sweep and plan routers answer such a request: 202 with the job."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, status
from fastapi.responses import JSONResponse

from app.core.deps import SessionDep
from app.core.openapi import PROBLEM_RESPONSES, ProblemDocument
from app.jobs import service
from app.jobs.schemas import Job
from app.tokens.auth import ReadAccess, WriteAccess

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=PROBLEM_RESPONSES)

# The request header that asks for a job instead of an answer in the response (RFC 7240).
PreferHeader = Annotated[
    str | None,
    Header(
        max_length=200,
        description="`respond-async`: answer 202 Accepted at once with a job to poll (GET /v1/jobs/{id}) instead of "
        "the result when it is done (RFC 7240)",
    ),
]

ACCEPTED_RESPONSE: dict[int | str, dict[str, Any]] = {
    202: {
        "model": Job,
        "description": "With `Prefer: respond-async`: the work runs as a job; poll `Location` (GET /v1/jobs/{id}) until "
        "its status is succeeded, failed or cancelled; `result.href` is the stored result",
        "headers": {
            "Location": {"description": "the job", "schema": {"type": "string"}},
            "Preference-Applied": {"description": "respond-async", "schema": {"type": "string"}},
        },
    }
}


def wants_async(prefer: str | None) -> bool:
    """Whether a Prefer header (RFC 7240: preferences separated by commas, parameters by
    semicolons) asks for respond-async."""
    if not prefer:
        return False
    return any(item.split(";", 1)[0].split("=", 1)[0].strip().lower() == "respond-async" for item in prefer.split(","))


def accepted(job: Job) -> JSONResponse:
    return JSONResponse(
        job.model_dump(mode="json"), status_code=status.HTTP_202_ACCEPTED,
        headers={"Location": job.href, "Preference-Applied": "respond-async"},
    )


@router.get("/{job_id}", operation_id="get_job", response_model=Job)
def get_job(job_id: str, session: SessionDep, access: ReadAccess) -> Job:
    """Where the job stands: its status, points done of total, and when it succeeded the link
    to its result (the stored sweep or plan); when it failed, the problem."""
    return service.get_job(session, job_id, access)


@router.delete(
    "/{job_id}", operation_id="cancel_job", response_model=Job,
    responses={409: {"description": "The job has already succeeded or failed", "model": ProblemDocument}},
)
def cancel_job(job_id: str, session: SessionDep, access: WriteAccess) -> Job:
    """Cancel the job: its points not yet started never run (a point already running is not
    waited for). The job stays readable with status cancelled."""
    document = service.cancel_job(session, job_id, access)
    session.commit()
    return document
