"""How readiness and metrics ask the database: with a short deadline that holds whatever the
database does (issue 17, defect 2).

A request's database calls end at the server's statement timeout, or at the client's own deadline
past it (``app.core.db_deadlines``) when the server stops answering: 6 and 7 times the database
timeout, too long for a probe, which must answer within the database timeout itself. A probe
therefore opens a fresh connection of its own (``app.core.db.make_probe_engine``: a pooled one may
be the stuck one) in a thread of its own, never the request thread pool, and the endpoint awaits
it at most ``timeout_s``. A probe that does not come back by then is left to end at its
connection's own deadline; at most ``MAX_IN_FLIGHT`` are left so at once, past which a probe fails
at once instead of starting another thread that would wait as well.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.core.db import make_probe_engine

T = TypeVar("T")

# Probes that may be waiting on the database at once (readiness and metrics side by side).
MAX_IN_FLIGHT = 2


class ProbeTimeout(Exception):
    """The database did not answer the probe within its timeout."""


def _retrieve(answer: asyncio.Future) -> None:
    if not answer.cancelled():
        answer.exception()


class DatabaseProbe:
    def __init__(self, database_url: str, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.engine: Engine = make_probe_engine(database_url, timeout_s)
        self._lock = threading.Lock()
        self._in_flight = 0

    async def run(self, function: Callable[[Session], T]) -> T:
        """``function(session)`` on a fresh connection, awaited at most ``timeout_s``: its result,
        the database error it raised, or ``ProbeTimeout``."""
        with self._lock:
            if self._in_flight >= MAX_IN_FLIGHT:
                raise ProbeTimeout(f"{self._in_flight} earlier probes are still waiting for the database")
            self._in_flight += 1
        outcome: Future[T] = Future()
        thread = threading.Thread(target=self._probe, args=(function, outcome), daemon=True, name="partitura-db-probe")
        try:
            thread.start()
        except BaseException:
            self._done()
            raise
        answer = asyncio.wrap_future(outcome)
        answer.add_done_callback(_retrieve)  # an answer that comes after the deadline is dropped quietly
        try:
            return await asyncio.wait_for(asyncio.shield(answer), self.timeout_s)
        except TimeoutError:
            raise ProbeTimeout(f"the database did not answer within {self.timeout_s:g} s") from None

    def _probe(self, function: Callable[[Session], T], outcome: Future[T]) -> None:
        try:
            with Session(self.engine) as session:
                outcome.set_result(function(session))
        except BaseException as error:
            outcome.set_exception(error)
        finally:
            self._done()

    def _done(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def dispose(self) -> None:
        self.engine.dispose()
