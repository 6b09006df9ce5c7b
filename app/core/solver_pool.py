"""A pool of solver processes for CPU-bound searches, with bounded concurrency and a deadline per
search that starts when the search starts.

At most ``workers`` searches run at once and at most ``queue_depth`` more wait; a call past that
is refused at once with ``SolverSaturated`` (the API answers 503 with Retry-After) instead of
queueing without bound. Each worker is a process of its own that runs one search at a time; a
search that overruns its deadline stops only its own process (a fresh one replaces it when next
needed), so the searches beside it and those waiting are untouched. Time spent waiting for a
worker does not count against a search's deadline. Workers are spawned, not forked, so they never
inherit the server's threads or database connections, and they exit when the server's end of
their pipe closes (the server stopped or was killed), so none is left behind.
"""

from __future__ import annotations

import math
import multiprocessing
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from typing import Any, TypeVar

T = TypeVar("T")

_SPAWN = multiprocessing.get_context("spawn")


class SolverSaturated(Exception):
    """Every solver slot is taken; retry after ``retry_after_s``."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"solver pool saturated; retry after {retry_after_s} s")
        self.retry_after_s = retry_after_s


class SolverUnavailable(Exception):
    """The search did not come back (its deadline passed, or its worker died, or the pool is
    shutting down)."""


def _serve(connection: Connection) -> None:
    """A worker's loop: run each (function, args) it is sent and send back ("ok", result) or
    ("error", exception); stop when the server closes its end."""
    while True:
        try:
            task = connection.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        function, args = task
        try:
            reply = ("ok", function(*args))
        except BaseException as error:  # the caller re-raises it (SpecError pickles)
            reply = ("error", error)
        try:
            connection.send(reply)
        except (BrokenPipeError, OSError):
            return


class _Worker:
    """One solver process and the server's end of its pipe, started on first use."""

    def __init__(self) -> None:
        self.process: Any = None
        self.connection: Connection | None = None

    def ensure_started(self) -> Connection:
        if self.process is None or not self.process.is_alive() or self.connection is None:
            self.stop()
            server_end, worker_end = _SPAWN.Pipe(duplex=True)
            self.process = _SPAWN.Process(target=_serve, args=(worker_end,), daemon=True, name="partitura-solver")
            self.process.start()
            worker_end.close()
            self.connection = server_end
        return self.connection

    def stop(self) -> None:
        """End the process now (a search it runs is abandoned)."""
        if self.connection is not None:
            self.connection.close()
            self.connection = None
        if self.process is not None:
            if self.process.is_alive():
                self.process.terminate()
            self.process.join(timeout=5)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(timeout=5)
            self.process = None

    def close(self) -> None:
        """Ask an idle process to exit, then make sure it did."""
        if self.connection is not None:
            try:
                self.connection.send(None)
            except (BrokenPipeError, OSError):
                pass
        self.stop()


# The longest Retry-After the pool asks for; the server keeps idle connections open longer than
# this (app.cli KEEP_ALIVE_S), so a client that waits as told finds its connection still there.
RETRY_AFTER_MAX_S = 60
# Weight of the newest search in the running mean of search times.
SOLVE_TIME_SMOOTHING = 0.3
# Clients told the same wait would all come back at once: each is told up to 20% more, at random.
RETRY_JITTER_FRACTION = 0.2


class InlineSolver:
    """The pool's interface, run in the calling thread: for the CLI, which plans one request and
    gains nothing from a process (spawning one costs it more than the search). The search keeps
    its own time budget; nothing stops it from outside."""

    capacity = 1

    def run(self, function: Callable[..., T], *args: Any, timeout_s: float) -> T:
        return function(*args)

    def retry_after(self) -> int:
        return 1

    def shutdown(self) -> None:
        pass


class SolverPool:
    def __init__(self, workers: int, queue_depth: int, retry_after_s: int) -> None:
        self.workers = workers
        self.capacity = workers + queue_depth
        self.retry_after_s = retry_after_s  # the least Retry-After
        self._mean_solve_s = 0.0
        self._slots = threading.BoundedSemaphore(self.capacity)
        self._lock = threading.Lock()
        self._in_use = 0
        self._closed = False
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._all = [_Worker() for _ in range(workers)]
        for worker in self._all:
            self._idle.put(worker)

    @property
    def in_use(self) -> int:
        return self._in_use

    def retry_after(self) -> int:
        """Seconds a refused caller should wait: what the searches ahead of it take to drain
        (slots in use x the running mean search time, over the workers), with jitter; at least
        ``retry_after_s``, at most ``RETRY_AFTER_MAX_S``."""
        drain_s = self._mean_solve_s * self._in_use / self.workers
        drain_s *= 1 + RETRY_JITTER_FRACTION * random.random()
        return int(min(RETRY_AFTER_MAX_S, max(self.retry_after_s, math.ceil(drain_s))))

    def _record_solve(self, seconds: float) -> None:
        with self._lock:
            if self._mean_solve_s == 0.0:
                self._mean_solve_s = seconds
            else:
                self._mean_solve_s += SOLVE_TIME_SMOOTHING * (seconds - self._mean_solve_s)

    def _take_slot(self) -> None:
        if not self._slots.acquire(blocking=False):
            raise SolverSaturated(self.retry_after())
        with self._lock:
            self._in_use += 1

    def _give_slot(self) -> None:
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
        """Run ``function(*args)`` in a worker process and wait at most ``timeout_s`` for it,
        counted from when a worker takes it (not while it waits for one).

        Blocks the calling thread (never call it on the event loop). An exception the function
        raises is raised here; ``SolverUnavailable`` when it overran (its process is stopped) or
        its process died.
        """
        self._take_slot()
        try:
            worker = self._idle.get()
            try:
                if self._closed:
                    raise SolverUnavailable("the solver pool is shutting down")
                return self._run_on(worker, function, args, timeout_s)
            finally:
                self._idle.put(worker)
        finally:
            self._give_slot()

    def _run_on(self, worker: _Worker, function: Callable[..., T], args: tuple, timeout_s: float) -> T:
        try:
            connection = worker.ensure_started()
            started_s = time.monotonic()
            connection.send((function, args))
            if not connection.poll(timeout_s):
                # The search overran its own budget by the grace period: stop its process only.
                worker.stop()
                raise SolverUnavailable(f"the search did not return within {timeout_s:g} s")
            outcome, value = connection.recv()
            self._record_solve(time.monotonic() - started_s)
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            worker.stop()
            raise SolverUnavailable("a solver process died; it is replaced for the next search") from None
        if outcome == "error":
            raise value
        return value

    def shutdown(self) -> None:
        """Stop every worker; a search still running is abandoned (its caller gets 503)."""
        self._closed = True
        for worker in self._all:
            worker.close()
