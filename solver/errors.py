"""Errors raised by the solver for input it cannot accept."""

from __future__ import annotations


class SpecError(ValueError):
    """An input field is invalid. ``field`` is a dotted path (e.g. ``parallel.tp_size``)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason
