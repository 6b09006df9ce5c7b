"""What a sweep's points say together: scaling efficiency, a fitted power law, the knee and the
Pareto front of time to train against cost.

The power law is the form of the scaling seeds: MLPerf BERT on DGX A100 trains in
228.3 * p^-0.7392 minutes on p GPUs (ideal scaling is b = 1). It is fitted by ordinary least
squares on (ln p, ln time): ln time = ln a - b ln p, with R^2 in that same log space.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from solver.cost.price import gpu_time_cost_usd

# Efficiency under which a series is said to have passed its knee, unless the request says
# otherwise: below 80% a team usually stops adding GPUs (a convention, not a law).
DEFAULT_EFFICIENCY_THRESHOLD = 0.8

FittedQuantity = Literal["time_to_train_s", "step_time_s"]


class PredictedFigures(Protocol):
    """What a sweep point reads from a prediction."""

    @property
    def step_time_s(self) -> float: ...
    @property
    def tokens_per_s(self) -> float: ...
    @property
    def mfu(self) -> float: ...
    @property
    def time_to_train_s(self) -> float | None: ...


@dataclass(frozen=True)
class PointResult:
    """A sweep point's best plan, in figures (None where the point has no plan, or the figure
    needs something the request did not give: train_tokens, a price)."""

    cluster: str
    num_gpus: int
    global_batch_size: int
    feasible: bool
    step_time_s: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    time_to_train_s: float | None = None
    gpu_hour_price_usd: float | None = None

    @staticmethod
    def planned(
        cluster: str, num_gpus: int, global_batch_size: int, prediction: PredictedFigures | None,
        gpu_hour_price_usd: float | None,
    ) -> PointResult:
        """A point's figures from its best plan's prediction (the solver's ``Prediction`` or its
        API form); an infeasible point (no prediction) has none."""
        if prediction is None:
            return PointResult(cluster, num_gpus, global_batch_size, feasible=False)
        return PointResult(
            cluster=cluster,
            num_gpus=num_gpus,
            global_batch_size=global_batch_size,
            feasible=True,
            step_time_s=prediction.step_time_s,
            tokens_per_s=prediction.tokens_per_s,
            mfu=prediction.mfu,
            time_to_train_s=prediction.time_to_train_s,
            gpu_hour_price_usd=gpu_hour_price_usd,
        )

    @property
    def cost_usd(self) -> float | None:
        """GPU-hours x price: num_gpus x time to train (h) x USD per GPU-hour."""
        if self.time_to_train_s is None or self.gpu_hour_price_usd is None:
            return None
        return gpu_time_cost_usd(self.time_to_train_s, self.num_gpus, self.gpu_hour_price_usd)


@dataclass(frozen=True)
class PowerLawFit:
    """time = a_s * p^-b over the fitted points, a_s in seconds (the time on one GPU the law
    extrapolates to); r_squared of the fit of ln time on ln p."""

    a_s: float
    b: float
    r_squared: float
    num_points: int

    def time_s(self, num_gpus: float) -> float:
        return self.a_s * num_gpus ** (-self.b)


def fit_power_law(num_gpus: Sequence[float], time_s: Sequence[float]) -> PowerLawFit | None:
    """Least squares of ln time = ln a - b ln p. None with fewer than two distinct GPU counts.
    R^2 = 1 - SS_res / SS_tot in log space (1 when every time is equal and fitted exactly)."""
    if len(num_gpus) != len(time_s):
        raise ValueError("num_gpus and time_s differ in length")
    xs = [math.log(p) for p in num_gpus]
    ys = [math.log(t) for t in time_s]
    if len(set(xs)) < 2:
        return None
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys))
    slope = sxy / sxx
    intercept = mean_y - slope * mean_x
    ss_res = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys))
    ss_tot = sum((y - mean_y) ** 2 for y in ys)
    r_squared = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return PowerLawFit(a_s=math.exp(intercept), b=-slope, r_squared=r_squared, num_points=n)


def scaling_efficiency(num_gpus: Sequence[int], tokens_per_s: Sequence[float]) -> list[float]:
    """Throughput per GPU against the first (smallest) point's: (tps_p / p) / (tps_0 / p_0).
    1.0 is linear scaling; at a fixed token budget it equals (T_0 p_0) / (T_p p)."""
    base = tokens_per_s[0] / num_gpus[0]
    return [tps / p / base for p, tps in zip(num_gpus, tokens_per_s)]


def knee(num_gpus: Sequence[int], efficiency: Sequence[float], threshold: float) -> int | None:
    """The smallest GPU count whose efficiency falls below ``threshold`` (None: it never does)."""
    for count, value in zip(num_gpus, efficiency):
        if value < threshold:
            return count
    return None


def pareto_front(time_s: Sequence[float], cost_usd: Sequence[float]) -> list[int]:
    """Indices of the points no other point beats on both time and cost (each at least as good,
    one strictly better), fastest first. Of exact duplicates the first is kept."""
    order = sorted(range(len(time_s)), key=lambda i: (time_s[i], cost_usd[i], i))
    front: list[int] = []
    cheapest = math.inf
    for i in order:
        if cost_usd[i] < cheapest:
            front.append(i)
            cheapest = cost_usd[i]
    return front


@dataclass(frozen=True)
class ScalingPoint:
    num_gpus: int
    time_s: float  # the fitted quantity at this count
    efficiency: float  # against the series' smallest feasible point


@dataclass(frozen=True)
class Series:
    """The feasible points of one cluster at one global batch size, by GPU count."""

    cluster: str
    global_batch_size: int
    points: tuple[ScalingPoint, ...]
    fit: PowerLawFit | None
    knee_num_gpus: int | None  # first count below the threshold


@dataclass(frozen=True)
class SweepAnalysis:
    fitted_quantity: FittedQuantity
    efficiency_threshold: float
    series: tuple[Series, ...]
    pareto: tuple[int, ...]  # indices into the sweep's points, fastest first


def _fitted_time_s(point: PointResult, quantity: FittedQuantity) -> float:
    value = point.time_to_train_s if quantity == "time_to_train_s" else point.step_time_s
    if value is None:
        raise ValueError(f"a feasible point without {quantity}")
    return value


def analyse(points: Sequence[PointResult], efficiency_threshold: float = DEFAULT_EFFICIENCY_THRESHOLD) -> SweepAnalysis:
    """Series by (cluster, global batch size) in the order they first appear, each with its
    efficiency, power-law fit and knee; and the Pareto front over every point that has both a
    time to train and a cost. Time to train is fitted when every feasible point has one (the
    request gave train_tokens), else the step time (the same exponent at a fixed batch)."""
    if not 0 < efficiency_threshold <= 1:
        raise ValueError(f"efficiency_threshold must be in (0, 1], got {efficiency_threshold}")
    feasible = [p for p in points if p.feasible]
    quantity: FittedQuantity = (
        "time_to_train_s" if feasible and all(p.time_to_train_s is not None for p in feasible) else "step_time_s"
    )
    keys: list[tuple[str, int]] = []
    for p in feasible:
        if (p.cluster, p.global_batch_size) not in keys:
            keys.append((p.cluster, p.global_batch_size))
    series = []
    for cluster, batch in keys:
        members = sorted((p for p in feasible if (p.cluster, p.global_batch_size) == (cluster, batch)), key=lambda p: p.num_gpus)
        counts = [p.num_gpus for p in members]
        times = [_fitted_time_s(p, quantity) for p in members]
        efficiency = scaling_efficiency(counts, [p.tokens_per_s or 0.0 for p in members])
        series.append(
            Series(
                cluster=cluster,
                global_batch_size=batch,
                points=tuple(ScalingPoint(c, t, e) for c, t, e in zip(counts, times, efficiency)),
                fit=fit_power_law(counts, times),
                knee_num_gpus=knee(counts, efficiency, efficiency_threshold),
            )
        )
    priced = [i for i, p in enumerate(points) if p.feasible and p.time_to_train_s is not None and p.cost_usd is not None]
    front = pareto_front([points[i].time_to_train_s or 0.0 for i in priced], [points[i].cost_usd or 0.0 for i in priced])
    return SweepAnalysis(quantity, efficiency_threshold, tuple(series), tuple(priced[i] for i in front))
