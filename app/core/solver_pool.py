"""A process pool for CPU-bound searches, with bounded concurrency and a per-call deadline.

At most ``workers`` searches run at once and at most ``queue_depth`` more wait; a call past that
is refused at once with ``SolverSaturated`` (the API answers 503 with Retry-After) instead of
queueing without bound. Workers are spawned, not forked, so they never inherit the server's
threads or database connections.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")


class SolverSaturated(Exception):
    """Every solver slot is taken; retry after ``retry_after_s``."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"solver pool saturated; retry after {retry_after_s} s")
        self.retry_after_s = retry_after_s


class SolverUnavailable(Exception):
    """The search did not come back (deadline passed, or a worker died)."""


class SolverPool:
    def __init__(self, workers: int, queue_depth: int, retry_after_s: int) -> None:
        self.workers = workers
        self.capacity = workers + queue_depth
        self.retry_after_s = retry_after_s
        self._slots = threading.BoundedSemaphore(self.capacity)
        self._lock = threading.Lock()
        self._in_use = 0
        self._executor: ProcessPoolExecutor | None = None

    @property
    def in_use(self) -> int:
        return self._in_use

    def _get_executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ProcessPoolExecutor(
                    max_workers=self.workers, mp_context=multiprocessing.get_context("spawn")
                )
            return self._executor

    def _discard_broken(self, executor: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._executor is executor:
                self._executor = None
        executor.shutdown(wait=False, cancel_futures=True)

    def _terminate(self, executor: ProcessPoolExecutor) -> None:
        """Stop the executor's worker processes. Python 3.11's ProcessPoolExecutor has no public
        way to stop a running task (``terminate_workers`` arrives in 3.14), so its process table
        is used directly."""
        with self._lock:
            if self._executor is executor:
                self._executor = None
        for process in list((getattr(executor, "_processes", None) or {}).values()):
            process.terminate()
        executor.shutdown(wait=False, cancel_futures=True)

    def _take_slot(self) -> None:
        if not self._slots.acquire(blocking=False):
            raise SolverSaturated(self.retry_after_s)
        with self._lock:
            self._in_use += 1

    def _give_slot(self, _future: Future | None = None) -> None:
        with self._lock:
            self._in_use -= 1
        self._slots.release()

    @contextmanager
    def reserved(self, count: int) -> Iterator[None]:
        """Hold ``count`` slots (operations and tests: drain the pool without running work)."""
        taken = 0
        try:
            for _ in range(count):
                self._take_slot()
                taken += 1
            yield
        finally:
            for _ in range(taken):
                self._give_slot()

    def run(self, function: Callable[..., T], *args: Any, timeout_s: float) -> T:
        """Run ``function(*args)`` in a worker process and wait at most ``timeout_s`` for it.

        Blocks the calling thread (never call it on the event loop). The slot is held until
        the work really ends, also when the caller stopped waiting, so the bound stays true.
        """
        self._take_slot()
        executor = self._get_executor()
        try:
            future = executor.submit(function, *args)
        except (BrokenProcessPool, RuntimeError) as error:
            self._give_slot()
            self._discard_broken(executor)
            raise SolverUnavailable(f"the solver pool is restarting ({error})") from None
        future.add_done_callback(self._give_slot)
        try:
            return future.result(timeout=timeout_s)
        except FutureTimeout:
            # The solver overran its own budget by the grace period: stop it rather than let it
            # hold a CPU. Other searches of this pool fail too (503, retryable); the next call
            # starts a fresh pool.
            self._terminate(executor)
            raise SolverUnavailable(f"the search did not return within {timeout_s:g} s") from None
        except BrokenProcessPool:
            self._discard_broken(executor)
            raise SolverUnavailable("a solver process died; the pool was restarted") from None

    def shutdown(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
