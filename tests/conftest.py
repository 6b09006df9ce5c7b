"""Fixtures for the service tests: real databases built by the migrations (SQLite and Postgres)
and a live HTTP server per database.

Postgres: a fresh database with a unique name per test run on PARTITURA_TEST_POSTGRES_URL
(default: the local server, user postgres, trust auth), migrated, and dropped afterwards. Without
a reachable server the Postgres tests are skipped locally and fail in CI (CI=true).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

import catalog
from app.core.config import Settings
from app.core.migrate import upgrade
from app.main import create_app

POSTGRES_ADMIN_URL = os.environ.get(
    "PARTITURA_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
SERVER_START_TIMEOUT_S = 30.0
BACKENDS = ["sqlite", "postgres"]


def _postgres_unavailable_reason() -> str | None:
    engine = create_engine(POSTGRES_ADMIN_URL, connect_args={"connect_timeout": 3})
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        return None
    except Exception as error:  # any failure to connect means: no Postgres here
        return f"PostgreSQL at {POSTGRES_ADMIN_URL} is unreachable: {type(error).__name__}"
    finally:
        engine.dispose()


def _require_postgres() -> None:
    reason = _postgres_unavailable_reason()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the Postgres tests (.ci/run starts the server)")
    pytest.skip(reason)


@contextmanager
def empty_database(backend: str, scratch: Path) -> Iterator[str]:
    """A new, empty database of ``backend``; yields its URL, removes it afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{scratch / f'partitura-{uuid.uuid4().hex[:8]}.db'}"
        return
    _require_postgres()
    name = f"partitura_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        yield make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session", params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A database of each backend for the whole run, built by the migrations."""
    with empty_database(request.param, tmp_path_factory.mktemp(request.param)) as url:
        upgrade(url)
        yield url


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop_process_group(process: subprocess.Popen) -> None:
    """Stop a server started in its own process group: SIGTERM, then SIGKILL after 30 s."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@dataclass
class LiveServer:
    """The app served by uvicorn on a loopback port, in a thread of the test process."""

    base_url: str
    app: object
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=SERVER_START_TIMEOUT_S)


def start_server(settings: Settings) -> LiveServer:
    app = create_app(settings)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.05)
    return LiveServer(f"http://127.0.0.1:{port}", app, server, thread)


def server_settings(database_url: str, **overrides: object) -> Settings:
    values = dict(
        database_url=database_url, solver_workers=2, solver_queue_depth=6, plan_time_budget_s=60.0, retry_after_s=7
    )
    values.update(overrides)
    return Settings(**values)


@pytest.fixture(scope="session")
def live_server(database_url: str) -> Iterator[LiveServer]:
    server = start_server(server_settings(database_url))
    try:
        yield server
    finally:
        server.stop()


# Searches one token may run at once on auth_server (PARTITURA_QUOTA_CONCURRENT_SOLVES).
AUTH_CONCURRENT_SOLVES = 2


@pytest.fixture(scope="session")
def auth_server(database_url: str) -> Iterator[LiveServer]:
    """The app with API tokens required (PARTITURA_AUTH=required) on the same database."""
    server = start_server(server_settings(database_url, auth_mode="required", quota_concurrent_solves=AUTH_CONCURRENT_SOLVES))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def api(live_server: LiveServer) -> Iterator[httpx.Client]:
    """An HTTP client on the live server of the current backend."""
    with httpx.Client(base_url=live_server.base_url, timeout=120.0) as client:
        yield client


def node_cluster(node: str, num_gpus: int):
    """A cluster of ``num_gpus`` GPUs of a catalog node type (as a request naming the node type
    and a GPU count gets it: whole nodes, or whole NVLink domains)."""
    return catalog.cluster_spec_from_dict(catalog.node_cluster_entry(node, num_gpus))


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def assert_problem(response: httpx.Response, status: int) -> dict:
    """The response is an RFC 9457 problem document with ``status``; returns its body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["status"] == status
    assert body["title"] and body["detail"] and body["type"]
    return body


def error_fields(problem: dict) -> list[str]:
    return [error["field"] for error in problem.get("errors", [])]
