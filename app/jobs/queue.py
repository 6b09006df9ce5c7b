"""The task queue on Postgres: procrastinate, with its tables in the ``procrastinate`` schema
(migration 20261123_0005). One task, ``partitura.run_point``, runs one point of a job
(app.jobs.work); ``partitura worker`` runs workers, the API defers.

A worker that dies (kill -9, a lost machine) stops sending heartbeats; every worker looks for
the jobs of workers silent for ``3 x heartbeat_s`` and puts them back in the queue, so another
worker runs their points again (procrastinate's stalled-job retry, run on a timer).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import procrastinate
import psycopg
import psycopg_pool
from procrastinate import RetryStrategy
from sqlalchemy.engine import make_url

from app.core.config import DEFAULT_DATABASE_TIMEOUT_S
from app.core.db import client_deadline_s, postgres_connect_args
from app.core.db_deadlines import CallDeadlines
from app.jobs.work import RetryablePoint, Runtime, run_point_or_fail

logger = logging.getLogger(__name__)

QUEUE_SCHEMA = "procrastinate"
# Every queue connection works in the queue's schema.
SEARCH_PATH_OPTION = f"-c search_path={QUEUE_SCHEMA}"
RUN_POINT_TASK = "partitura.run_point"
QUEUE_NAME = "partitura"
# A saturated solver pool or a lost search: the point is tried again, up to this many times, a
# few seconds apart (app.jobs.work.MAX_POINT_ATTEMPTS bounds the starts of a point overall).
POINT_RETRY = RetryStrategy(max_attempts=10, wait=2, retry_exceptions={RetryablePoint})
# A worker whose heartbeat is this many intervals old is taken for dead.
STALLED_HEARTBEATS = 3
DEFAULT_HEARTBEAT_S = 10.0


def conninfo(database_url: str) -> str:
    """The libpq URL of a SQLAlchemy ``postgresql+psycopg://`` URL."""
    return make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)


def connector_options(timeout_s: float = DEFAULT_DATABASE_TIMEOUT_S) -> dict[str, Any]:
    """psycopg pool options: every queue connection works in the queue's schema, with the
    service's database timeouts (app.core.db.postgres_connect_args: a connect timeout and a
    statement timeout), and ``timeout_s`` to wait for a pooled connection."""
    connect_args = postgres_connect_args(timeout_s)
    return {
        "kwargs": {**connect_args, "options": f"{SEARCH_PATH_OPTION} {connect_args['options']}"},
        "timeout": timeout_s,
    }


def _deadline_connection_class(deadlines: CallDeadlines) -> type[psycopg.Connection[Any]]:
    """A psycopg connection whose statements (through any cursor, the pool's health check
    included), commits and rollbacks run under ``deadlines``: a database that stops answering on
    a pooled connection gets the socket shut down at the deadline (app.core.db_deadlines), so
    the call fails instead of holding the request for good."""

    class DeadlineCursor(psycopg.Cursor[Any]):
        execute = deadlines.watched(psycopg.Cursor.execute, on_cursor=True)
        executemany = deadlines.watched(psycopg.Cursor.executemany, on_cursor=True)

    class DeadlineConnection(psycopg.Connection[Any]):
        commit = deadlines.watched(psycopg.Connection.commit)
        rollback = deadlines.watched(psycopg.Connection.rollback)

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.cursor_factory = DeadlineCursor

    return DeadlineConnection


def point_lock(job_id: str, position: int) -> str:
    """One point never runs on two workers at once (procrastinate runs jobs of a lock in turn)."""
    return f"partitura-point-{job_id}-{position}"


def deferring_app(database_url: str, timeout_s: float = DEFAULT_DATABASE_TIMEOUT_S) -> procrastinate.App:
    """A procrastinate app for the API process, which only defers (synchronously), opened on a
    pool whose every call has the service's database timeouts and a client-side deadline one
    timeout past the statement timeout (as app.core.db.make_engine's), so a hung queue database
    fails a request (503) instead of holding it."""
    options = connector_options(timeout_s)
    deadlines = CallDeadlines(client_deadline_s(timeout_s))
    # One connection kept open per API process: a replica defers a job's points in one burst.
    # Opened without waiting for it: a database that is away fails the first defer after
    # ``timeout_s`` (the pool's wait for a connection), not after psycopg_pool's 30 s.
    pool = psycopg_pool.ConnectionPool(
        conninfo(database_url), min_size=1, max_size=4, open=False,
        connection_class=_deadline_connection_class(deadlines), check=psycopg_pool.ConnectionPool.check_connection,
        **options,
    )
    pool.open(wait=False)
    app = procrastinate.App(connector=procrastinate.SyncPsycopgConnector())
    app.open(pool)
    return app


def worker_app(database_url: str, runtime: Runtime) -> procrastinate.App:
    """A procrastinate app with the point task, for ``partitura worker``."""
    # The worker's pool keeps procrastinate's own waits (a worker holds a listening connection
    # and up to ``concurrency`` busy ones); its connections work in the queue's schema.
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(
        conninfo=conninfo(database_url), kwargs={"options": SEARCH_PATH_OPTION}))

    @app.task(name=RUN_POINT_TASK, queue=QUEUE_NAME, retry=POINT_RETRY)
    def run_point(job_id: str, position: int) -> bool:
        return run_point_or_fail(runtime, job_id, position)

    return app


def defer_points(app: procrastinate.App, job_id: str, positions: list[int]) -> None:
    for position in positions:
        app.configure_task(RUN_POINT_TASK, queue=QUEUE_NAME, lock=point_lock(job_id, position)).defer(
            job_id=job_id, position=position
        )


async def _requeue_stalled(app: procrastinate.App, heartbeat_s: float) -> None:
    """Every ``heartbeat_s``: the point jobs of workers silent for STALLED_HEARTBEATS beats go
    back to the queue."""
    while True:
        await asyncio.sleep(heartbeat_s)
        try:
            stalled = await app.job_manager.get_stalled_jobs(
                task_name=RUN_POINT_TASK, seconds_since_heartbeat=STALLED_HEARTBEATS * heartbeat_s
            )
            for job in stalled:
                logger.warning("requeueing point job %s of a stalled worker", job.id)
                await app.job_manager.retry_job(job)
        except Exception:  # the database may be away for a moment; try again next beat
            logger.exception("looking for stalled jobs failed")


async def run_worker(app: procrastinate.App, concurrency: int, heartbeat_s: float = DEFAULT_HEARTBEAT_S) -> None:
    """Run a worker until it is stopped (SIGINT/SIGTERM), requeueing dead workers' points."""
    async with app.open_async():
        requeue = asyncio.create_task(_requeue_stalled(app, heartbeat_s), name="partitura-requeue-stalled")
        try:
            await app.run_worker_async(
                queues=[QUEUE_NAME], concurrency=concurrency, update_heartbeat_interval=heartbeat_s,
                stalled_worker_timeout=STALLED_HEARTBEATS * heartbeat_s, install_signal_handlers=True,
            )
        finally:
            requeue.cancel()
