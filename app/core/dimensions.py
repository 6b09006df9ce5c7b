"""The request fields of the parallel dimensions, generated from the solver's registry
(``solver.spec.dimensions``), so that a new dimension reaches the API's ``parallel`` object and
its search constraints without a second list of names here."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from app.core.types import LIST_MAX_ITEMS, Flag, PositiveInt, not_given
from solver.spec.dimensions import DIMENSIONS, NUM_GPUS, Dimension, Kind, NvmeOffload, Offload
from solver.spec.parallel import ParallelConfig
from solver.spec.training import Recompute

RecomputeName = Literal[tuple(mode.value for mode in Recompute)]  # type: ignore[valid-type]
OffloadName = Literal[tuple(mode.value for mode in Offload)]  # type: ignore[valid-type]
NvmeOffloadName = Literal[tuple(mode.value for mode in NvmeOffload)]  # type: ignore[valid-type]
ZeroStageNumber = Annotated[int, Field(strict=True, ge=0, le=3)]
LayerCount = Annotated[int, Field(strict=True, ge=0)]


def value_type(dimension: Dimension) -> Any:
    """The JSON type of one value of ``dimension``."""
    return {
        Kind.COUNT: PositiveInt,
        Kind.ZERO: ZeroStageNumber,
        Kind.RECOMPUTE: RecomputeName,
        Kind.FLAG: Flag,
        Kind.OFFLOAD: OffloadName,
        Kind.NVME: NvmeOffloadName,
        Kind.LAYERS: LayerCount,
    }[dimension.kind]


def parallel_fields() -> dict[str, Any]:
    """The ``parallel`` object's dimension fields, each defaulting as ``ParallelConfig`` does: one
    that follows another (``Dimension.follows``) defaults to null, the value it follows."""
    defaults = ParallelConfig()
    fields = {}
    for d in DIMENSIONS:
        if d.follows is not None:
            fields[d.name] = (value_type(d) | None, Field(None, description=d.description))
        else:
            fields[d.name] = (value_type(d), Field(d.to_api(getattr(defaults, d.name)), description=d.description))
    return fields


def constraint_fields(int_rule: Any) -> dict[str, Any]:
    """The search constraints' dimension fields: a value or a list of values, or for integer
    dimensions ``int_rule`` (a value, a list or a {"min", "max"} range); absent when not given."""
    fields = {}
    for d in (*DIMENSIONS, NUM_GPUS):
        value = value_type(d)
        annotation = int_rule | None if d.ranged else value | Annotated[list[value], Field(max_length=LIST_MAX_ITEMS)] | None
        fields[d.name] = (annotation, not_given(d.description))
    return fields
