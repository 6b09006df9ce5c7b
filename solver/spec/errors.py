"""Errors raised by the solver for input it cannot accept."""

from __future__ import annotations


class SpecError(ValueError):
    """An input field is invalid. ``field`` is a dotted path (e.g. ``parallel.tp_size``)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        """Pickle by (field, reason), so the error crosses a process pool intact."""
        return (type(self), (self.field, self.reason))


def check_positive_int(field: str, value: object) -> None:
    """Raise SpecError unless ``value`` is an int (not a bool) of at least 1."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SpecError(field, f"must be a positive integer, got {value!r}")
