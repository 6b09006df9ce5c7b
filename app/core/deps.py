"""FastAPI dependencies: the per-request session and the app's shared services.

State lives on ``app.state`` (set up in ``app.main.create_app``), never in module globals, so
two apps (two test databases) can run in one process.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.core.metrics import Metrics
from app.core.solver_pool import SolverPool


def get_session(request: Request) -> Iterator[Session]:
    """One session per request. Routers commit at the end of a successful request; anything
    not committed is rolled back here."""
    session: Session = request.app.state.sessionmaker()
    try:
        yield session
    finally:
        session.close()


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_solver_pool(request: Request) -> SolverPool:
    return request.app.state.solver_pool


def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
SolverPoolDep = Annotated[SolverPool, Depends(get_solver_pool)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
