"""Field types shared by request schemas: strict JSON numbers with bounds that keep the solver sane,
and the default of an optional field."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StrictBool

from solver.cost import evaluate
from solver.search import request
from solver.spec import hardware, training

# Integers must be JSON integers: `true` or "8" is an error, not 1 or 8.
PositiveInt = Annotated[int, Field(strict=True, ge=1)]
NonNegativeInt = Annotated[int, Field(strict=True, ge=0)]
# An upper bound on structural sizes keeps a typo (1e12 layers) from becoming a minutes-long solve.
Size = Annotated[int, Field(strict=True, ge=1, le=2**24)]
# Numbers must be JSON numbers and flags JSON booleans: `true` is not 1.0, `0` is not false, "3" is
# not 3.0 (strict; a JSON integer is still a number).
PositiveFloat = Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)]
NonNegativeFloat = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]
Fraction = Annotated[float, Field(strict=True, gt=0, le=1, allow_inf_nan=False)]
Flag = StrictBool
EntryName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
# A reference to a catalog entry or a stored profile by name or id: bounded, so a 10 MB name is a
# 422 and not a 10 MB search for suggestions (the lookup says whether it exists).
Reference = Annotated[str, Field(min_length=1, max_length=128)]
# Lists a request may carry: allowed values of a dimension, layers per pipeline chunk (a chunk
# holds at least one of at most 1,024 layers).
LIST_MAX_ITEMS = 1024


def _is_none(value: object) -> bool:
    return value is None


def not_given(description: str | None = None) -> Any:
    """The default of an optional request field whose null means "not given". A dump leaves the
    field out, so a stored request (dumped with ``exclude_none``) reads back through the same
    model and is answered exactly as it was stored, without nulls it never had."""
    return Field(None, description=description, exclude_if=_is_none)


# Request figures bounded by the solver's plausible ranges (stated once in solver/, converted to
# the API's units here), so an out-of-range figure is a 422 naming the field, never an infinite
# prediction: see solver.spec.hardware, solver.spec.training and solver.cost.evaluate.
def _in_range(low: float, high: float, scale: float = 1.0) -> Any:
    return Annotated[float, Field(strict=True, ge=low / scale, le=high / scale, allow_inf_nan=False)]


Efficiency = _in_range(*hardware.EFFICIENCY_RANGE)
PeakTflopsValue = _in_range(*hardware.PEAK_FLOPS_PER_S_RANGE, scale=1e12)
MemoryGib = _in_range(*hardware.MEMORY_BYTES_RANGE, scale=2**30)
HostMemoryGib = _in_range(*hardware.HOST_MEMORY_BYTES_RANGE, scale=2**30)
NvmeGbytes = _in_range(*hardware.NVME_BYTES_RANGE, scale=1e9)  # drives are sold in decimal GB/TB
HbmGbytesPerS = _in_range(*hardware.HBM_BYTES_PER_S_RANGE, scale=1e9)
LinkGbytesPerS = _in_range(*hardware.LINK_BYTES_PER_S_RANGE, scale=1e9)
LatencyUs = _in_range(*hardware.LATENCY_S_RANGE, scale=1e-6)
PriceUsd = _in_range(*hardware.GPU_HOUR_PRICE_USD_RANGE)
TrainTokens = Annotated[float, Field(strict=True, gt=0, le=training.TRAIN_TOKENS_MAX, allow_inf_nan=False)]
HostSeconds = Annotated[float, Field(strict=True, ge=0, le=training.HOST_S_PER_LAYER_MAX, allow_inf_nan=False)]
StepCopyBytes = Annotated[int, Field(strict=True, ge=0, le=training.STEP_GRAD_COPY_BYTES_MAX)]
SubGroupParams = Annotated[int, Field(strict=True, ge=0, le=training.SUB_GROUP_PARAMS_MAX)]
FragmentationFraction = Annotated[float, Field(strict=True, ge=0, le=training.FRAGMENTATION_FRACTION_MAX, allow_inf_nan=False)]
MemoryFraction = _in_range(*evaluate.MEMORY_FRACTION_RANGE)
DeadlineS = _in_range(*request.DEADLINE_S_RANGE)
