"""What a search returns: ranked candidates, search statistics and, when nothing fits, why."""

from __future__ import annotations

from dataclasses import dataclass, field

from solver.cost.result import Evaluation
from solver.spec.parallel import ParallelConfig, parallel_to_dict


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
        return dict(self.__dict__)

@dataclass(frozen=True)
class SearchResult:
    candidates: tuple[Candidate, ...]
    stats: SearchStats
    explanation: dict | None  # None when a plan was found; else why not and what would fit

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
            "explanation": self.explanation,
        }
