"""Identical plan requests in flight in one process share one search: the first (the leader)
searches; the others (followers) wait for it to store its plan, then answer with that plan, and
never take a solver slot. Across replicas the database's unique key on the request hash stays the
guarantee that one plan is stored per request."""

from __future__ import annotations

import threading


class SingleFlight:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flights: dict[str, threading.Event] = {}

    def join(self, key: str) -> tuple[bool, threading.Event]:
        """(True, event) for the request that leads ``key``'s flight; (False, event) for a follower,
        whose event is set once the leader has stored its plan (or failed)."""
        with self._lock:
            event = self._flights.get(key)
            if event is not None:
                return False, event
            event = threading.Event()
            self._flights[key] = event
            return True, event

    def release(self, key: str, event: threading.Event) -> None:
        """The leader is done (its plan committed, or it failed): wake its followers."""
        with self._lock:
            if self._flights.get(key) is event:
                del self._flights[key]
        event.set()

    def in_flight(self) -> int:
        with self._lock:
            return len(self._flights)
