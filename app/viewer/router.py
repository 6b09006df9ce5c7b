"""The plan viewer's pages: ``/plans`` (recent plans, with filters) and ``/plans/{id}`` (one
plan: candidates, prediction, step time, pipeline schedule, memory per stage), and
``/sweeps/{id}`` (a sweep's scaling and Pareto charts and its points, linked). HTML with inline
SVG and inline CSS, no script and nothing from another host; the JSON stays at ``/v1/plans``.
With PARTITURA_AUTH=required the pages take a token like ``/v1/plans`` and show only what it may
read (docs/auth.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse

from app.core.deps import SessionDep
from app.core.problems import Problem
from app.plans import service
from app.sweeps import service as sweeps
from app.tokens.auth import ReadAccess
from app.viewer.pages import list_page, plan_page
from app.viewer.sweep_page import sweep_page

router = APIRouter(include_in_schema=False)

# The pages load nothing but themselves: inline styles and SVG, no script, no other host.
HEADERS = {"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'"}


@router.get("/plans", response_class=HTMLResponse)
def plans_page(
    session: SessionDep,
    access: ReadAccess,
    model: Annotated[str | None, Query(max_length=128)] = None,
    cluster: Annotated[str | None, Query(max_length=128)] = None,
    plan_status: Annotated[Literal["succeeded", "infeasible", ""] | None, Query(alias="status")] = None,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> HTMLResponse:
    model, cluster, status = model or None, cluster or None, plan_status or None  # an empty filter field is no filter
    plans = service.list_plans(session, 50, cursor, model, cluster, status, access)
    return HTMLResponse(list_page(plans, model, cluster, status), headers=HEADERS)


@router.get("/plans/{plan_id}", response_class=HTMLResponse)
def plan_view(
    plan_id: str, session: SessionDep, access: ReadAccess,
    candidate: Annotated[int, Query(ge=0, le=49, description="0 is the best")] = 0,
) -> HTMLResponse:
    plan = service.get_plan(session, plan_id, access)
    if plan.candidates and candidate >= len(plan.candidates):
        reason = f"the plan has {len(plan.candidates)} candidates: 0 to {len(plan.candidates) - 1}"
        raise Problem(
            404, "Unknown candidate", f"query.candidate: {reason}", slug="not-found",
            errors=[{"field": "query.candidate", "reason": reason}],
        )
    return HTMLResponse(plan_page(plan, candidate), headers=HEADERS)


@router.get("/sweeps/{sweep_id}", response_class=HTMLResponse)
def sweep_view(sweep_id: str, session: SessionDep, access: ReadAccess) -> HTMLResponse:
    document = sweeps.get_sweep(session, sweep_id, access)
    scaling, pareto = sweeps.scaling_svg(session, sweep_id, access), sweeps.pareto_svg(session, sweep_id, access)
    return HTMLResponse(sweep_page(document, scaling, pareto), headers=HEADERS)
