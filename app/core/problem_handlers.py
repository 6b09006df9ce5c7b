"""The HTTP side of problem documents (``app.core.problems``): the response a ``Problem`` is
answered with, and the handlers that turn every error the service can meet (validation, a
solver ``SpecError``, Starlette's 404/405, a database that does not answer or is not migrated,
anything unexpected) into one."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import InterfaceError, OperationalError, ProgrammingError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from app.core.problems import PROBLEM_MEDIA_TYPE, Problem, from_spec_error, unreadable_body, validation_errors
from solver.spec.errors import SpecError

logger = logging.getLogger("partitura.errors")


def problem_response(problem: Problem, request: Request | None = None) -> JSONResponse:
    return JSONResponse(
        problem.to_dict(instance=request.url.path if request is not None else None),
        status_code=problem.status,
        media_type=PROBLEM_MEDIA_TYPE,
        headers=problem.headers or None,
    )


HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")

# Seconds a client is asked to wait when the database fails a request.
DATABASE_RETRY_AFTER_S = 5
# Postgres's SQLSTATEs for a schema the migrations have not built (yet): undefined table, undefined
# column, invalid schema name. SQLite says it in the message.
NOT_MIGRATED_SQLSTATES = frozenset({"42P01", "42703", "3F000"})
SQLITE_NOT_MIGRATED = ("no such table", "no such column")


def not_migrated(error: Exception) -> bool:
    """Whether a database error says the schema is not (fully) built: a database nobody ran the
    migrations on, or one at an older revision."""
    driver_error = getattr(error, "orig", None)
    if getattr(driver_error, "sqlstate", None) in NOT_MIGRATED_SQLSTATES:
        return True
    return str(driver_error).startswith(SQLITE_NOT_MIGRATED)


def allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """Every method some route answers at the request's path. Starlette's 405 names only the
    first route that matches the path (``/v1/plans`` answers GET and POST from two routes)."""
    return [
        method
        for method in HTTP_METHODS
        if any(route.matches({**request.scope, "method": method})[0] is Match.FULL for route in app.router.routes)
    ]


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(Problem)
    async def _problem(request: Request, problem: Problem) -> JSONResponse:
        return problem_response(problem, request)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, error: RequestValidationError) -> JSONResponse:
        errors = validation_errors(list(error.errors()))
        detail = "; ".join(f"{e['field']}: {e['reason']}" for e in errors) or "the request is invalid"
        problem = Problem(422, "Invalid request", detail, slug="invalid-request", errors=errors)
        return problem_response(problem, request)

    @app.exception_handler(SpecError)
    async def _spec(request: Request, error: SpecError) -> JSONResponse:
        return problem_response(from_spec_error(error, "body"), request)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException) -> JSONResponse:
        if error.status_code == 400 and (unreadable := unreadable_body(error.__cause__)) is not None:
            return problem_response(unreadable, request)
        title = {404: "Not found", 405: "Method not allowed"}.get(error.status_code, "Error")
        detail = str(error.detail)
        if error.status_code == 404 and detail == "Not Found":
            detail = f"no resource at {request.url.path}"
        headers = dict(error.headers or {})
        if error.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(app, request))
        problem = Problem(error.status_code, title, detail, headers=headers)
        return problem_response(problem, request)

    @app.exception_handler(OperationalError)
    @app.exception_handler(InterfaceError)
    @app.exception_handler(PoolTimeoutError)
    @app.exception_handler(ProgrammingError)
    async def _database_down(request: Request, error: Exception) -> JSONResponse:
        metrics = request.app.state.metrics
        if not_migrated(error):
            metrics.database_errors.labels(reason="not-migrated").inc()
            logger.warning("database not migrated on %s %s: %s", request.method, request.url.path, getattr(error, "orig", error))
            problem = Problem(
                503, "Database not migrated",
                "the database's schema is not at the migrations' head; run `partitura db upgrade`",
                slug="database-not-migrated", headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)},
            )
            return problem_response(problem, request)
        if isinstance(error, ProgrammingError):  # any other: a fault of the service's own SQL
            return await _unexpected(request, error)
        metrics.database_errors.labels(reason="unavailable").inc()
        logger.warning("database unavailable on %s %s: %s", request.method, request.url.path, getattr(error, "orig", error))
        problem = Problem(
            503, "Database unavailable", "the database did not answer; retry shortly", slug="database-unavailable",
            headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)},
        )
        return problem_response(problem, request)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, error: Exception) -> JSONResponse:
        logger.exception("unhandled error on %s %s", request.method, request.url.path)
        problem = Problem(500, "Internal error", "the service failed; the error is logged", slug="internal")
        return problem_response(problem, request)
