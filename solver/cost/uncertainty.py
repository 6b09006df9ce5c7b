"""How far a prediction may be off: a range from the residuals of measured runs.

The accuracy bench leaves, for every measured run, the ratio of measured to predicted throughput.
Grouped by the software stack and GPU generation that ran them, those ratios give a band
[low_ratio, high_ratio] that held the measured value of most runs in the group (how the bands are
built and checked: bench/error_bands.py; the bands: catalog/data/error_bands.json). A prediction
then carries throughput in [predicted x low, predicted x high], and step time and time to train
in the inverse range. The band is empirical, not a confidence interval of any model.
"""

from __future__ import annotations

from dataclasses import dataclass

from solver.spec.errors import SpecError


@dataclass(frozen=True)
class ErrorBand:
    """Measured / predicted throughput ratios bounding a prediction; ``group`` names the runs
    they come from (e.g. 'megatron-lm-2021/a100', or 'all') and ``runs`` how many there were."""

    low_ratio: float
    high_ratio: float
    group: str
    runs: int

    def __post_init__(self) -> None:
        if not 0 < self.low_ratio <= self.high_ratio <= 100:
            raise SpecError("error_band", f"needs 0 < low_ratio <= high_ratio <= 100, got {self.low_ratio!r}, {self.high_ratio!r}")


@dataclass(frozen=True)
class PredictionRange:
    """Where the measured figures of a prediction are expected to fall."""

    tokens_per_s_low: float
    tokens_per_s_high: float
    step_time_low_s: float
    step_time_high_s: float
    time_to_train_low_s: float | None
    time_to_train_high_s: float | None
    group: str
    runs: int

    def to_dict(self) -> dict:
        return {
            "tokens_per_s_low": self.tokens_per_s_low,
            "tokens_per_s_high": self.tokens_per_s_high,
            "step_time_low_s": self.step_time_low_s,
            "step_time_high_s": self.step_time_high_s,
            "time_to_train_low_s": self.time_to_train_low_s,
            "time_to_train_high_s": self.time_to_train_high_s,
            "group": self.group,
            "runs": self.runs,
        }


def prediction_range(
    tokens_per_s: float, step_time_s: float, time_to_train_s: float | None, band: ErrorBand
) -> PredictionRange:
    """The range around one prediction: throughput scaled by the band, times by its inverse."""
    return PredictionRange(
        tokens_per_s_low=tokens_per_s * band.low_ratio,
        tokens_per_s_high=tokens_per_s * band.high_ratio,
        step_time_low_s=step_time_s / band.high_ratio,
        step_time_high_s=step_time_s / band.low_ratio,
        time_to_train_low_s=None if time_to_train_s is None else time_to_train_s / band.high_ratio,
        time_to_train_high_s=None if time_to_train_s is None else time_to_train_s / band.low_ratio,
        group=band.group,
        runs=band.runs,
    )
