"""/v1/profiles: upload, read, list and delete measured per-layer profiles."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from app.core.deps import SessionDep
from app.core.openapi import PROBLEM_RESPONSES
from app.profiles import service
from app.profiles.schemas import Profile, ProfileDocumentIn, ProfileList
from app.tokens.auth import ReadAccess, WriteAccess

router = APIRouter(prefix="/v1/profiles", tags=["profiles"], responses=PROBLEM_RESPONSES)


@router.post("", operation_id="create_profile", response_model=Profile, status_code=status.HTTP_201_CREATED)
def create_profile(body: ProfileDocumentIn, response: Response, session: SessionDep, access: WriteAccess) -> dict:
    """Store a measured profile. It is validated strictly: a 422 names the layer and the field
    (``body.layers[3].forward_s``)."""
    stored = service.create_profile(session, body.document(), access)
    session.commit()
    response.headers["Location"] = f"/v1/profiles/{stored['id']}"
    return stored


@router.get("", operation_id="list_profiles", response_model=ProfileList)
def list_profiles(
    session: SessionDep,
    access: ReadAccess,
    model: Annotated[str | None, Query(description="only profiles of this model name")] = None,
    limit: Annotated[int, Query(ge=1, le=service.MAX_PAGE_SIZE)] = 20,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
) -> dict:
    """Profiles, newest first, a page at a time (without their documents)."""
    return service.list_profiles(session, limit, cursor, model, access)


@router.get("/{profile_id}", operation_id="get_profile", response_model=Profile)
def get_profile(profile_id: str, session: SessionDep, access: ReadAccess) -> dict:
    return service.get_profile(session, profile_id, access)


@router.delete("/{profile_id}", operation_id="delete_profile", status_code=status.HTTP_204_NO_CONTENT)
def delete_profile(profile_id: str, session: SessionDep, access: WriteAccess) -> Response:
    service.delete_profile(session, profile_id, access)
    session.commit()
    return Response(status_code=status.HTTP_204_NO_CONTENT)
