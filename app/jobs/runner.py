"""Where a job's points run. ``QueueRunner`` (Postgres): deferred to procrastinate, run by any
number of ``partitura worker`` processes on any machines. ``EmbeddedRunner`` (SQLite, ``make
run``): threads of the API process run the same ``app.jobs.work`` functions, and at start-up it
takes up the jobs a stopped process left open, so a newcomer needs nothing more.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from app.core.config import DEFAULT_DATABASE_TIMEOUT_S
from app.core.problems import Problem
from app.jobs.models import OPEN_STATUSES, Job
from app.jobs.queue import defer_points, deferring_app
from app.jobs.work import MAX_POINT_ATTEMPTS, RetryablePoint, Runtime, SessionFactory, fail_job, finish_job, pending_positions, run_point_or_fail

logger = logging.getLogger(__name__)


class EmbeddedRunner:
    """Points run in ``workers`` threads of this process, through its solver pool."""

    def __init__(self, runtime: Runtime, workers: int) -> None:
        self.runtime = runtime
        self._executor = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="partitura-job")
        self._stopping = threading.Event()

    def submit(self, job_id: str, positions: list[int]) -> None:
        for position in positions:
            self._executor.submit(self._run, job_id, position)

    def finish(self, job_id: str) -> None:
        finish_job(self.runtime.session_factory, job_id)

    def _run(self, job_id: str, position: int) -> None:
        for _ in range(MAX_POINT_ATTEMPTS * 2):
            if self._stopping.is_set():
                return
            try:
                run_point_or_fail(self.runtime, job_id, position)
                return
            except RetryablePoint as busy:
                self._stopping.wait(busy.retry_after_s)
            except Exception:
                logger.exception("job %s point %s failed", job_id, position)
                return

    def resume(self) -> None:
        """Take up the open jobs of this database (left by a stopped process): run their points
        not done, finish those with every point done. In the background: the service starts
        (and /readyz says why) on a database that is away or not migrated."""
        self._executor.submit(self._resume)

    def _resume(self) -> None:
        try:
            with self.runtime.session_factory() as session:
                open_jobs = list(session.scalars(select(Job.id).where(Job.status.in_(OPEN_STATUSES)).order_by(Job.created_at)))
                pending = {job_id: pending_positions(session, job_id) for job_id in open_jobs}
        except SQLAlchemyError as error:
            logger.warning("open jobs not taken up: %s", type(error).__name__)
            return
        for job_id, positions in pending.items():
            if positions:
                self.submit(job_id, positions)
            else:
                self._executor.submit(self.finish, job_id)

    def shutdown(self) -> None:
        """Stop: points not started stay queued in the database (``resume`` takes them up)."""
        self._stopping.set()
        self._executor.shutdown(wait=False, cancel_futures=True)


class QueueRunner:
    """Points are deferred to procrastinate on the service's Postgres; workers run them."""

    def __init__(self, database_url: str, session_factory: SessionFactory, timeout_s: float = DEFAULT_DATABASE_TIMEOUT_S) -> None:
        self._database_url = database_url
        self._session_factory = session_factory
        self._timeout_s = timeout_s
        self._app: Any = None
        self._lock = threading.Lock()

    def _opened(self) -> Any:
        with self._lock:
            if self._app is None:
                self._app = deferring_app(self._database_url, self._timeout_s)
            return self._app

    def submit(self, job_id: str, positions: list[int]) -> None:
        """Defer the points; if the queue refuses them, the job fails (it would wait forever)
        and the request is a 503."""
        try:
            defer_points(self._opened(), job_id, positions)
        except Exception as error:
            problem = Problem(503, "Queue unavailable", f"the job queue did not take the job: {type(error).__name__}",
                              slug="queue-unavailable", headers={"Retry-After": "5"})
            fail_job(self._session_factory, job_id, problem.to_dict())
            raise problem from error

    def finish(self, job_id: str) -> None:
        finish_job(self._session_factory, job_id)

    def resume(self) -> None:
        """Nothing to do: the queue keeps the points in Postgres, and the workers requeue a
        dead worker's."""

    def shutdown(self) -> None:
        with self._lock:
            if self._app is not None:
                pool = self._app.connector.pool  # opened here, so closed here (app.close leaves it)
                self._app.close()
                pool.close()
                self._app = None


def make_runner(database_url: str, runtime: Runtime, workers: int,
                timeout_s: float = DEFAULT_DATABASE_TIMEOUT_S) -> EmbeddedRunner | QueueRunner:
    """The queue on Postgres (with the service's database timeouts); in this process on SQLite."""
    if database_url.startswith("sqlite"):
        return EmbeddedRunner(runtime, workers)
    return QueueRunner(database_url, runtime.session_factory, timeout_s)

