"""Errors raised by the solver for input it cannot accept."""

from __future__ import annotations

from solver.spec.rules import Rule


class SpecError(ValueError):
    """An input field is invalid. ``field`` is a dotted path (e.g. ``parallel.tp_size``);
    ``rule`` names the legality rule broken, when one is (its tag then opens ``reason``)."""

    def __init__(self, field: str, reason: str, rule: Rule | None = None) -> None:
        if rule is not None:
            reason = f"{rule.tag} {reason}"
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason
        self.rule = rule

    def __reduce__(self) -> tuple[type, tuple[str, str, Rule | None]]:
        """Pickle by (field, reason, rule), so the error crosses a process pool intact."""
        reason = self.reason[len(self.rule.tag) + 1 :] if self.rule is not None else self.reason
        return (type(self), (self.field, reason, self.rule))


def check_in_range(field: str, value: float, low: float, high: float, unit: str = "") -> None:
    """Raise SpecError unless ``low <= value <= high`` (NaN is never in range)."""
    if not low <= value <= high:
        unit = f" {unit}" if unit else ""
        raise SpecError(field, f"must be between {low:g} and {high:g}{unit}, got {value!r}")


def check_positive_int(field: str, value: object) -> None:
    """Raise SpecError unless ``value`` is an int (not a bool) of at least 1."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SpecError(field, f"must be a positive integer, got {value!r}")
