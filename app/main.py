"""The ASGI application: ``create_app(settings)`` wires routers, error handlers, metrics, the
database and the solver pool. ``partitura serve`` runs it with uvicorn."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response
from fastapi.routing import APIRoute

from app.catalog.router import router as catalog_router
from app.core.config import Settings
from app.core.db import make_engine, make_sessionmaker
from app.core.docs import install_docs
from app.core.limits import BodyLimitMiddleware, JsonOnlyMiddleware
from app.core.metrics import Metrics
from app.core.migrate import head_revision
from app.core.openapi import AUTH_RESPONSES
from app.core.problem_handlers import install_handlers
from app.core.problems import PROBLEM_MEDIA_TYPE
from app.core.single_flight import SingleFlight
from app.core.solver_pool import SolverPool
from app.core.versions import current_versions
from app.evaluations.router import router as evaluations_router
from app.health.probe import DatabaseProbe
from app.health.router import router as health_router
from app.jobs.router import router as jobs_router
from app.jobs.runner import make_runner
from app.jobs.work import Runtime
from app.plans.router import router as plans_router
from app.profiles.router import router as profiles_router
from app.sizing.router import router as sizing_router
from app.sweeps.router import router as sweeps_router
from app.tokens.auth import SolveSlots
from app.tokens.router import router as tokens_router
from app.viewer.router import router as viewer_router

DESCRIPTION = """Partitura plans how to split transformer training over a GPU cluster: data,
tensor and pipeline parallel degrees, ZeRO stage, micro-batch size and recomputation.
`POST /v1/evaluations` predicts one configuration; `POST /v1/plans` searches for the best ones.
Errors are RFC 9457 problem documents. With authentication required (PARTITURA_AUTH=required),
every /v1 operation takes an API token as `Authorization: Bearer <token>`."""


def _operation_id(route: APIRoute) -> str:
    return route.operation_id or route.name


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings.from_env()
    engine = make_engine(settings.database_url, settings.database_timeout_s)
    pool = SolverPool(settings.solver_workers, settings.solver_queue_depth, settings.retry_after_s)
    probe = DatabaseProbe(settings.database_url, settings.database_timeout_s)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        jobs.resume()  # SQLite: open jobs left by a stopped process run here again
        try:
            yield
        finally:
            jobs.shutdown()
            pool.shutdown()
            probe.dispose()
            engine.dispose()

    app = FastAPI(
        title="Partitura",
        version="1.0.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        generate_unique_id_function=_operation_id,
        docs_url=None,  # served from the package by app.core.docs, not from a CDN
        redoc_url=None,
        openapi_tags=[
            {"name": "plans", "description": "Search for parallel configurations; stored and idempotent"},
            {"name": "evaluations", "description": "Evaluate one configuration"},
            {"name": "sweeps", "description": "Plan a grid of GPU counts, clusters and batch sizes; scaling curves"},
            {"name": "jobs", "description": "Sweeps and plans asked with `Prefer: respond-async`: poll, cancel"},
            {"name": "sizing", "description": "Compute-optimal model size and tokens for a budget (Chinchilla)"},
            {"name": "catalog", "description": "GPUs, models and clusters"},
            {"name": "operations", "description": "Health, readiness, metrics"},
            {"name": "tokens", "description": "API tokens (admin scope)"},
        ],
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.database_probe = probe  # readiness and metrics (app.health.probe)
    app.state.sessionmaker = make_sessionmaker(engine)
    app.state.solver_pool = pool
    app.state.single_flight = SingleFlight()
    app.state.solve_slots = SolveSlots(settings.quota_concurrent_solves)
    app.state.metrics = Metrics()
    app.state.versions = current_versions()
    app.state.migration_head = head_revision()
    # Jobs (sweeps and plans asked with Prefer: respond-async): procrastinate workers on Postgres,
    # threads of this process on SQLite (app.jobs.runner).
    jobs = make_runner(
        settings.database_url,
        Runtime(app.state.sessionmaker, pool, app.state.metrics, settings, app.state.versions, app.state.single_flight),
        settings.solver_workers,
        settings.database_timeout_s,
    )
    app.state.jobs = jobs

    install_handlers(app)
    install_docs(app)
    app.add_middleware(JsonOnlyMiddleware)
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes)
    app.include_router(plans_router)
    app.include_router(evaluations_router)
    app.include_router(catalog_router)
    app.include_router(health_router)
    app.include_router(profiles_router)
    app.include_router(sweeps_router)
    app.include_router(sizing_router)
    app.include_router(jobs_router)
    app.include_router(viewer_router)  # HTML pages of stored plans (/plans)
    app.include_router(tokens_router)

    @app.middleware("http")
    async def record_latency(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started_s = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        template = getattr(route, "path", "unmatched")
        app.state.metrics.request_duration_s.labels(
            method=request.method, route=template, status=str(response.status_code)
        ).observe(time.perf_counter() - started_s)
        app.state.metrics.solver_slots_in_use.set(pool.in_use)
        return response

    _serve_problem_media_type(app, auth_required=settings.auth_mode == "required")
    return app


# Every operation that reads or writes the database may answer 503 while the database does not
# answer (app.core.problems); these paths never touch it, or answer anyway.
DATABASE_FREE_PATHS = {"/healthz", "/metrics"}
DATABASE_UNAVAILABLE = {
    "description": "The database did not answer, or is not migrated; retry after Retry-After seconds",
    "headers": {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}},
    "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/ProblemDocument"}}},
}

# What any operation that takes a body may answer before its own handler runs (app.core.limits).
BODY_PROBLEMS = {
    "413": "The request body is larger than the service takes (PARTITURA_MAX_BODY_BYTES)",
    "415": "The request body is not JSON",
}


PROBLEM_CONTENT = {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/ProblemDocument"}}}


def _serve_problem_media_type(app: FastAPI, auth_required: bool) -> None:
    """Error responses are documented as ``application/problem+json``, the type they are sent as.
    Operations that take the bearer token may answer 401 and 403; with authentication off the
    token is optional (``security`` also lists ``{}``, no requirement)."""
    generate = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = generate()
            for path, operations in schema.get("paths", {}).items():
                for operation in operations.values():
                    for status_code, response in operation.get("responses", {}).items():
                        content = response.get("content", {})
                        if status_code[:1] in "45" and content and PROBLEM_MEDIA_TYPE not in content:
                            # An error is a problem document whatever the operation answers on
                            # success (FastAPI files it under the route's response_class, e.g.
                            # image/svg+xml for the sweep charts).
                            media = content.get("application/json") or next(iter(content.values()))
                            response["content"] = {PROBLEM_MEDIA_TYPE: media}
                    if path not in DATABASE_FREE_PATHS:
                        operation["responses"].setdefault("503", DATABASE_UNAVAILABLE)
                    if "security" in operation:
                        for status_code, response in AUTH_RESPONSES.items():
                            operation["responses"].setdefault(status_code, {**response, "content": PROBLEM_CONTENT})
                        if not auth_required:
                            operation["security"].append({})
                    if "requestBody" in operation:
                        for status_code, description in BODY_PROBLEMS.items():
                            operation["responses"].setdefault(status_code, {
                                "description": description,
                                "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/ProblemDocument"}}},
                            })
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
