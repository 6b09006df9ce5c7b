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
from procrastinate import RetryStrategy
from sqlalchemy.engine import make_url

from app.jobs.work import RetryablePoint, Runtime, run_point_or_fail

logger = logging.getLogger(__name__)

QUEUE_SCHEMA = "procrastinate"
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


def connector_options() -> dict[str, Any]:
    """psycopg pool options: every queue connection works in the queue's schema."""
    return {"kwargs": {"options": f"-c search_path={QUEUE_SCHEMA}"}}


def point_lock(job_id: str, position: int) -> str:
    """One point never runs on two workers at once (procrastinate runs jobs of a lock in turn)."""
    return f"partitura-point-{job_id}-{position}"


def deferring_app(database_url: str) -> procrastinate.App:
    """A procrastinate app for the API process, which only defers (synchronously)."""
    # One connection kept open per API process: a replica defers a job's points in one burst.
    connector = procrastinate.SyncPsycopgConnector(conninfo=conninfo(database_url), min_size=1, max_size=4, **connector_options())
    return procrastinate.App(connector=connector)


def worker_app(database_url: str, runtime: Runtime) -> procrastinate.App:
    """A procrastinate app with the point task, for ``partitura worker``."""
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo(database_url), **connector_options()))

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
