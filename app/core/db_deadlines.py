"""A deadline on every call the service makes to Postgres, kept by the client (issue 17, defect 2).

The statement timeout is enforced by the database server and the connect timeout only while
connecting. A server that stops answering on a connection the pool already holds (its process
hung, its host frozen, a network path that drops packets) leaves the call waiting for good, and
with it the request and its thread. Here every statement, commit, rollback and pre-ping on an
engine gets a deadline a little past the server's statement timeout, so a live server always
answers (or cancels) first; a call still waiting at its deadline has its connection's socket shut
down, which ends the call with the driver's "server closed the connection" error, and the pool
throws that connection away. The request is then answered 503 like any database that does not
answer (app.core.problem_handlers).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine

logger = logging.getLogger(__name__)

# How often the watcher looks for overdue calls.
WATCH_INTERVAL_S = 0.25


class CallDeadlines:
    """Calls in progress, one per DBAPI connection, and a thread that cuts the overdue ones."""

    def __init__(self, deadline_s: float) -> None:
        self.deadline_s = deadline_s
        self._lock = threading.Lock()
        self._calls: dict[int, tuple[float, Any]] = {}  # id(connection) -> (deadline, connection)
        self._watcher: threading.Thread | None = None

    def arm(self, dbapi_connection: Any) -> None:
        with self._lock:
            self._calls[id(dbapi_connection)] = (time.monotonic() + self.deadline_s, dbapi_connection)
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch, daemon=True, name="partitura-db-deadlines")
                self._watcher.start()

    def disarm(self, dbapi_connection: Any) -> None:
        with self._lock:
            self._calls.pop(id(dbapi_connection), None)

    def _watch(self) -> None:
        while True:
            time.sleep(WATCH_INTERVAL_S)
            now = time.monotonic()
            with self._lock:
                overdue = [key for key, (deadline, _) in self._calls.items() if deadline <= now]
                connections = [self._calls.pop(key)[1] for key in overdue]
                idle = not self._calls
                if idle:
                    self._watcher = None  # the next call starts a new watcher
            for connection in connections:
                logger.warning("a database call ran past its %g s deadline: its connection is closed", self.deadline_s)
                _shut_down(connection)
            if idle:
                return

    def watched(self, call: Callable[..., Any], on_cursor: bool = False) -> Callable[..., Any]:
        """``call(dbapi_connection, ...)``, or ``call(cursor, ...)`` with ``on_cursor``, under a
        deadline."""

        def under_deadline(target: Any, *args: Any, **kwargs: Any) -> Any:
            connection = target.connection if on_cursor else target
            self.arm(connection)
            try:
                return call(target, *args, **kwargs)
            finally:
                self.disarm(connection)

        return under_deadline


def _shut_down(dbapi_connection: Any) -> None:
    """Shut down the connection's socket from this thread: the call waiting on it in another
    thread wakes with an error (closing the descriptor would not wake it)."""
    try:
        descriptor = os.dup(dbapi_connection.pgconn.socket)
    except Exception:  # already closed
        return
    with socket.socket(fileno=descriptor) as duplicate:
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def install(engine: Engine, deadline_s: float) -> CallDeadlines:
    """Put every statement, commit, rollback and pre-ping of ``engine`` (psycopg) under
    ``deadline_s``."""
    deadlines = CallDeadlines(deadline_s)
    dialect = engine.dialect  # this engine's own instance: wrapping its methods touches no other
    for name in ("do_execute", "do_executemany", "do_execute_no_params"):
        setattr(dialect, name, deadlines.watched(getattr(dialect, name), on_cursor=True))
    for name in ("do_ping", "do_commit", "do_rollback"):
        setattr(dialect, name, deadlines.watched(getattr(dialect, name)))
    return deadlines
