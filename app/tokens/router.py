"""/v1/tokens: create, list, read and revoke API tokens (admin scope; docs/auth.md)."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from app.core.deps import SessionDep
from app.core.openapi import PROBLEM_RESPONSES
from app.tokens import service
from app.tokens.auth import AdminAccess
from app.tokens.schemas import Token, TokenCreated, TokenList, TokenRequest

router = APIRouter(prefix="/v1/tokens", tags=["tokens"], responses=PROBLEM_RESPONSES)


@router.post("", operation_id="create_token", response_model=TokenCreated, status_code=status.HTTP_201_CREATED)
def create_token(body: TokenRequest, response: Response, session: SessionDep, _access: AdminAccess) -> TokenCreated:
    """Create a token. The answer holds the token, shown this once: only its SHA-256 is stored."""
    created = service.create_token(session, body.name, body.scopes, body.plans_per_minute)
    session.commit()
    response.headers["Location"] = f"/v1/tokens/{created.id}"
    response.headers["Cache-Control"] = "no-store"
    return created


@router.get("", operation_id="list_tokens", response_model=TokenList)
def list_tokens(session: SessionDep, _access: AdminAccess) -> TokenList:
    """Every token, newest first, revoked ones included (never the tokens themselves)."""
    return service.list_tokens(session)


@router.get("/{token_id}", operation_id="get_token", response_model=Token)
def get_token(token_id: str, session: SessionDep, _access: AdminAccess) -> Token:
    return service.get_token(session, token_id)


@router.delete("/{token_id}", operation_id="revoke_token", status_code=status.HTTP_204_NO_CONTENT)
def revoke_token(token_id: str, session: SessionDep, _access: AdminAccess) -> Response:
    """Revoke a token: requests with it are answered 401 from now on. What it created stays,
    readable by admins."""
    service.revoke_token(session, token_id)
    session.commit()
    return Response(status_code=status.HTTP_204_NO_CONTENT)
