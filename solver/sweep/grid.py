"""The axes of a sweep and their expansion into points.

An axis is one value, a list of values, or a range: ``GridRange(minimum, maximum, step=s)`` is
minimum, minimum + s, ... and ``GridRange(minimum, maximum, factor=f)`` is minimum, minimum * f,
... (both up to and including ``maximum``). A range's length is known before it is expanded, so
a range of a billion values is refused without being built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from solver.spec.errors import SpecError

# The most points one sweep may have: the 13 GPU counts x 3 GPU types is 39; 128 leaves
# room for a batch-size axis while a synchronous request still answers in well under a minute.
MAX_SWEEP_POINTS = 128


@dataclass(frozen=True)
class GridRange:
    """An inclusive range of positive integers, by ``step`` (arithmetic) or ``factor``
    (geometric); exactly one of the two."""

    minimum: int
    maximum: int
    step: int | None = None
    factor: int | None = None

    def check(self, field: str) -> None:
        if self.minimum < 1:
            raise SpecError(f"{field}.min", f"must be at least 1, got {self.minimum}")
        if self.maximum < self.minimum:
            raise SpecError(f"{field}.max", f"max {self.maximum} is below min {self.minimum}")
        if (self.step is None) == (self.factor is None):
            raise SpecError(field, "a range needs exactly one of step (arithmetic) or factor (geometric)")
        if self.step is not None and self.step < 1:
            raise SpecError(f"{field}.step", f"must be at least 1, got {self.step}")
        if self.factor is not None and self.factor < 2:
            raise SpecError(f"{field}.factor", f"must be at least 2, got {self.factor}")

    def length(self) -> int:
        """How many values the range holds, without building them."""
        if self.step is not None:
            return (self.maximum - self.minimum) // self.step + 1
        count, value = 0, self.minimum
        while value <= self.maximum:
            count, value = count + 1, value * (self.factor or 2)
        return count

    def values(self) -> list[int]:
        if self.step is not None:
            return list(range(self.minimum, self.maximum + 1, self.step))
        out, value = [], self.minimum
        while value <= self.maximum:
            out.append(value)
            value *= self.factor or 2
        return out


Axis = int | Sequence[int] | GridRange


def axis_length(axis: Axis, field: str) -> int:
    if isinstance(axis, GridRange):
        axis.check(field)
        return axis.length()
    if isinstance(axis, int):
        return 1
    return len(axis)


def axis_values(axis: Axis, field: str) -> list[int]:
    """The axis's distinct values in ascending order; SpecError naming ``field`` if one is not a
    positive integer or the axis is empty."""
    if isinstance(axis, GridRange):
        axis.check(field)
        return axis.values()
    raw = [axis] if isinstance(axis, int) else list(axis)
    if not raw:
        raise SpecError(field, "the list is empty")
    for value in raw:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(field, f"values must be positive integers, got {value!r}")
    return sorted(set(raw))


@dataclass(frozen=True)
class GridPoint:
    """One point of a sweep: a cluster (by name), a GPU count and a global batch size."""

    cluster: str
    num_gpus: int
    global_batch_size: int


def expand(
    clusters: Sequence[str], num_gpus: Axis, global_batch_size: Axis, max_points: int = MAX_SWEEP_POINTS
) -> list[GridPoint]:
    """Every combination, ordered by cluster (as given), then batch size, then GPU count.
    SpecError (field ``num_gpus``, ``training.global_batch_size`` or ``cluster``) for an empty
    or malformed axis, or when the sweep would have more than ``max_points`` points."""
    if not clusters:
        raise SpecError("cluster", "name at least one cluster")
    if len(set(clusters)) != len(clusters):
        raise SpecError("cluster", "a cluster is named twice")
    sizes = {
        "num_gpus": axis_length(num_gpus, "num_gpus"),
        "training.global_batch_size": axis_length(global_batch_size, "training.global_batch_size"),
    }
    total = len(clusters) * sizes["num_gpus"] * sizes["training.global_batch_size"]
    if total > max_points:
        largest = max(sizes, key=lambda name: sizes[name])
        raise SpecError(
            largest,
            f"the sweep has {total} points ({len(clusters)} clusters x {sizes['num_gpus']} GPU counts x "
            f"{sizes['training.global_batch_size']} batch sizes); at most {max_points} are planned in one request",
        )
    counts = axis_values(num_gpus, "num_gpus")
    batches = axis_values(global_batch_size, "training.global_batch_size")
    return [GridPoint(cluster, count, batch) for cluster in clusters for batch in batches for count in counts]
