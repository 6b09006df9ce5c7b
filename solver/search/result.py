"""What a search returns: ranked candidates, search statistics and, when nothing fits, why."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from solver.cost.result import Evaluation
from solver.spec.parallel import ParallelConfig, parallel_to_dict
from solver.spec.rules import Rule


def _json_with_parallel(result: Any) -> dict:
    """A result dataclass's fields in order, its ``parallel`` in the API's dict form."""
    return {f.name: getattr(result, f.name) for f in fields(result)} | {"parallel": parallel_to_dict(result.parallel)}


class _ByKey:
    """A result dataclass whose fields also read as items, by their JSON keys."""

    def __getitem__(self, key: str) -> Any:
        if key not in {f.name for f in fields(self)}:  # type: ignore[arg-type]
            raise KeyError(key)
        return getattr(self, key)


@dataclass(frozen=True)
class Candidate:
    rank: int
    parallel: ParallelConfig
    evaluation: Evaluation
    objective_value: float  # lower is better, in the objective's unit (s, USD, GPUs, s/token)
    why: str  # why it ranks where it does against the next candidate

    def to_dict(self) -> dict:
        out = self.evaluation.to_dict()
        return {
            "rank": self.rank,
            "parallel": parallel_to_dict(self.parallel),
            "objective_value": self.objective_value,
            "why": self.why,
            **{k: out[k] for k in ("feasible", "violations", "prediction", "memory", "stages", "profile_origins")},
        }



@dataclass
class SearchStats:
    """What the search did: shapes enumerated, pruned by a bound, illegal and evaluated; the
    partition solver calls by method (and CP-SAT's statuses); whether the result is proven
    optimal under the model or the time budget stopped it."""

    configurations_enumerated: int = 0
    configurations_pruned: int = 0
    configurations_illegal: int = 0
    configurations_evaluated: int = 0
    cpsat_calls: int = 0
    cpsat_status: dict[str, int] = field(default_factory=dict)
    partition_methods: dict[str, int] = field(default_factory=dict)  # fast / chain / cpsat / fixed -> solves
    wall_time_s: float = 0.0
    proven_optimal: bool = False
    timed_out: bool = False

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class MemoryMiss(_ByKey):
    """The legal configuration that comes closest to fitting in memory."""

    text: str
    peak_gib: float
    usable_gib: float
    num_gpus: int
    parallel: ParallelConfig
    memory_gib: dict[str, float]  # the peak stage's memory by what holds it (MEMORY_KEYS)
    fits: bool

    def to_dict(self) -> dict:
        return _json_with_parallel(self)


@dataclass(frozen=True)
class DeadlineMiss(_ByKey):
    """The fastest plan, which still misses the deadline."""

    text: str
    time_to_train_s: float | None
    num_gpus: int
    parallel: ParallelConfig

    def to_dict(self) -> dict:
        return _json_with_parallel(self)


@dataclass(frozen=True)
class Suggestion(_ByKey):
    """A change to the request, checked: the search ran on the changed request and found this."""

    change: str
    checked: bool
    num_gpus: int
    parallel: ParallelConfig
    step_time_s: float
    time_to_train_s: float | None
    peak_gib: float

    def to_dict(self) -> dict:
        return _json_with_parallel(self)


@dataclass(frozen=True)
class Explanation(_ByKey):
    """Why a search found nothing: the binding rule, rejections per rule, the closest miss and
    the smallest checked changes that would find a plan."""

    binding_constraint: Rule
    binding_text: str
    rejections: dict[str, int]  # rule tag -> shapes it rejected
    closest_miss: MemoryMiss | DeadlineMiss | None
    suggestions: tuple[Suggestion, ...]
    summary: str

    def to_dict(self) -> dict:
        return {
            "binding_constraint": self.binding_constraint.value,
            "binding_text": self.binding_text,
            "rejections": dict(self.rejections),
            "closest_miss": self.closest_miss.to_dict() if self.closest_miss is not None else None,
            "suggestions": [s.to_dict() for s in self.suggestions],
            "summary": self.summary,
        }


@dataclass(frozen=True)
class SearchResult:
    candidates: tuple[Candidate, ...]
    stats: SearchStats
    explanation: Explanation | None  # None when a plan was found; else why not and what would fit

    @property
    def status(self) -> str:
        return "succeeded" if self.candidates else "infeasible"

    @property
    def best(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None

    def to_dict(self) -> dict:
        return {
            "status": self.status,
            "best": self.best.to_dict() if self.best else None,
            "candidates": [c.to_dict() for c in self.candidates],
            "search": self.stats.to_dict(),
            "explanation": self.explanation.to_dict() if self.explanation is not None else None,
        }
