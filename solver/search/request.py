"""The optimizer's request and result types (the search itself is ``solver.search``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from solver.cost.evaluate import MEMORY_FRACTION_RANGE, evaluate
from solver.cost.profile import ModelProfile
from solver.cost.result import Evaluation
from solver.cost.uncertainty import ErrorBand
from solver.spec.dimensions import PINNABLE
from solver.spec.errors import SpecError, check_in_range
from solver.spec.hardware import ClusterSpec
from solver.spec.model import ModelSpec
from solver.spec.parallel import ParallelConfig
from solver.spec.training import Framework, TrainingSpec

# A deadline up to 1e12 s (30,000 years): beyond it a comparison is no longer meaningful.
DEADLINE_S_RANGE = (1e-3, 1e12)


class Objective(str, Enum):
    MAX_THROUGHPUT = "max_throughput"
    MIN_TIME_TO_TRAIN = "min_time_to_train"  # needs training.train_tokens
    MIN_COST = "min_cost"  # needs a GPU-hour price (cluster or request)
    MIN_GPUS = "min_gpus"  # fewest GPUs meeting deadline_s (needs train_tokens)


@dataclass(frozen=True)
class Allowed:
    """Values one dimension may take: a set of values, or an inclusive [min, max] range."""

    values: frozenset | None = None
    minimum: float | None = None
    maximum: float | None = None

    def admits(self, value: Any) -> bool:
        if self.values is not None and value not in self.values:
            return False
        if self.minimum is not None and value < self.minimum:
            return False
        if self.maximum is not None and value > self.maximum:
            return False
        return True

    @staticmethod
    def parse(dimension: str, raw: Any) -> "Allowed":
        """From the API form: a value, a list of values, or {"min": a, "max": b}."""
        dim = PINNABLE[dimension]
        field_name = f"constraints.{dimension}"

        def check(value: Any) -> Any:
            return dim.constraint_value(value, field_name)

        if isinstance(raw, dict):
            unknown = set(raw) - {"min", "max"}
            if unknown or not raw:
                raise SpecError(field_name, "a range needs 'min' and/or 'max' only")
            if not dim.ranged:
                raise SpecError(field_name, "a range only applies to integer dimensions")
            lo = check(raw["min"]) if "min" in raw else None
            hi = check(raw["max"]) if "max" in raw else None
            if lo is not None and hi is not None and lo > hi:
                raise SpecError(field_name, f"min {lo} is above max {hi}")
            return Allowed(minimum=lo, maximum=hi)
        if isinstance(raw, list):
            if not raw:
                raise SpecError(field_name, "the list of allowed values is empty")
            return Allowed(values=frozenset(check(v) for v in raw))
        return Allowed(values=frozenset([check(raw)]))


@dataclass(frozen=True)
class Constraints:
    """Pins and bounds on the search. ``max_memory_fraction`` caps usable GPU memory."""

    allowed: dict[str, Allowed] = field(default_factory=dict)
    max_memory_fraction: float = 1.0
    allow_tp_across_nodes: bool = False
    framework: Framework = Framework.ANY

    def admits(self, dimension: str, value: Any) -> bool:
        rule = self.allowed.get(dimension)
        return rule is None or rule.admits(value)

    @staticmethod
    def parse(raw: dict[str, Any] | None) -> "Constraints":
        raw = dict(raw or {})
        fraction = raw.pop("max_memory_fraction", 1.0)
        if not isinstance(fraction, (int, float)) or isinstance(fraction, bool):
            raise SpecError("constraints.max_memory_fraction", "must be a number in (0, 1]")
        check_in_range("constraints.max_memory_fraction", fraction, *MEMORY_FRACTION_RANGE)
        across = raw.pop("allow_tp_across_nodes", False)
        if not isinstance(across, bool):
            raise SpecError("constraints.allow_tp_across_nodes", "must be true or false")
        framework = raw.pop("framework", Framework.ANY.value)
        try:
            framework = Framework(framework)
        except ValueError:
            choices = ", ".join(f.value for f in Framework)
            raise SpecError("constraints.framework", f"expected one of {choices}, got {framework!r}") from None
        allowed = {}
        for dimension, value in raw.items():
            if dimension not in PINNABLE:
                known = ", ".join(sorted(PINNABLE) + ["allow_tp_across_nodes", "framework", "max_memory_fraction"])
                raise SpecError(f"constraints.{dimension}", f"unknown dimension; known: {known}")
            allowed[dimension] = Allowed.parse(dimension, value)
        return Constraints(allowed, float(fraction), across, framework)


@dataclass(frozen=True)
class SearchRequest:
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    num_gpus: int | None = None  # None: every GPU of the cluster (or the num_gpus constraint)
    objective: Objective = Objective.MAX_THROUGHPUT
    constraints: Constraints = field(default_factory=Constraints)
    top_k: int = 5
    deadline_s: float | None = None  # for MIN_GPUS: the time-to-train the plan must meet
    gpu_hour_price_usd: float | None = None  # for MIN_COST; overrides the cluster's price
    time_budget_s: float = 30.0  # safety net; the search is deterministic within it
    profile: ModelProfile | None = None  # a measured profile to plan from
    error_band: ErrorBand | None = None  # gives every prediction a range (solver.cost.uncertainty)

    def evaluate(self, parallel: ParallelConfig, num_gpus: int) -> Evaluation:
        """The evaluator's verdict on ``parallel`` on ``num_gpus`` GPUs, under this request's
        profile, framework, placement rule and usable memory."""
        c = self.constraints
        return evaluate(
            self.model, self.cluster, self.training, parallel, num_gpus, self.profile,
            c.framework, c.allow_tp_across_nodes, c.max_memory_fraction, self.error_band,
        )


