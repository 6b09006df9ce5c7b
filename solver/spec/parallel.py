"""One way to split the training job (``ParallelConfig``) and its API dict form."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from solver.spec.errors import SpecError, check_positive_int
from solver.spec.training import Recompute, ZeroStage


@dataclass(frozen=True)
class ParallelConfig:
    """One way to split the training job.

    ``stage_layers`` gives the number of transformer layers of each pipeline stage (for
    interleaving, of each model chunk in pipeline order, ``pp_size * virtual_stages`` entries);
    None means the uniform split. ``full_recompute_layers`` gives, per entry of the same list,
    how many of that chunk's layers are fully recomputed; the other layers use ``recompute``
    (or no recomputation when ``recompute`` is FULL). None means: every layer follows
    ``recompute``.
    """

    dp_size: int = 1
    tp_size: int = 1
    pp_size: int = 1
    zero_stage: ZeroStage = ZeroStage.NONE
    micro_batch_size: int = 1
    recompute: Recompute = Recompute.NONE
    virtual_stages: int = 1
    sequence_parallel: bool = False
    stage_layers: tuple[int, ...] | None = None
    full_recompute_layers: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("dp_size", "tp_size", "pp_size", "micro_batch_size", "virtual_stages"):
            check_positive_int(f"parallel.{name}", getattr(self, name))
        try:
            object.__setattr__(self, "zero_stage", ZeroStage(self.zero_stage))
        except ValueError:
            raise SpecError("parallel.zero_stage", f"must be 0, 1, 2 or 3, got {self.zero_stage!r}") from None
        object.__setattr__(self, "recompute", Recompute(self.recompute))
        for name in ("stage_layers", "full_recompute_layers"):
            values = getattr(self, name)
            if values is not None:
                object.__setattr__(self, name, self._per_chunk(name, values))

    def _per_chunk(self, name: str, values: object) -> tuple[int, ...]:
        """A per-chunk list (one non-negative integer per model chunk, pipeline order)."""
        values = tuple(values)
        if len(values) != self.num_chunks:
            raise SpecError(
                f"parallel.{name}", f"needs pp_size * virtual_stages = {self.num_chunks} entries, got {len(values)}"
            )
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in values):
            raise SpecError(f"parallel.{name}", "entries must be non-negative integers")
        return values

    @property
    def num_gpus(self) -> int:
        return self.dp_size * self.tp_size * self.pp_size

    @property
    def num_chunks(self) -> int:
        """Model chunks in pipeline order (pp_size for 1F1B, pp_size * v when interleaved)."""
        return self.pp_size * self.virtual_stages


def micro_batch_count(global_batch_size: int, dp_size: int, micro_batch_size: int) -> int:
    """Micro-batches each data-parallel replica runs per step: B / (dp * mb) (exact once
    ``check_structure`` has passed)."""
    return global_batch_size // (dp_size * micro_batch_size)


def parallel_to_dict(parallel: ParallelConfig) -> dict:
    return {
        "dp_size": parallel.dp_size,
        "tp_size": parallel.tp_size,
        "pp_size": parallel.pp_size,
        "zero_stage": int(parallel.zero_stage),
        "micro_batch_size": parallel.micro_batch_size,
        "recompute": parallel.recompute.value,
        "virtual_stages": parallel.virtual_stages,
        "sequence_parallel": parallel.sequence_parallel,
        "stage_layers": list(parallel.stage_layers) if parallel.stage_layers else None,
        "full_recompute_layers": (
            list(parallel.full_recompute_layers) if parallel.full_recompute_layers else None
        ),
    }

def parallel_from_dict(raw: dict[str, Any]) -> ParallelConfig:
    """The API's ``parallel`` object; unknown keys are an error naming the key."""
    known = set(parallel_to_dict(ParallelConfig()).keys())
    unknown = set(raw) - known
    if unknown:
        raise SpecError(f"parallel.{sorted(unknown)[0]}", f"unknown field; known: {', '.join(sorted(known))}")
    kwargs = {k: v for k, v in raw.items() if v is not None}
    for key in ("stage_layers", "full_recompute_layers"):
        if key in kwargs:
            if not isinstance(kwargs[key], list):
                raise SpecError(f"parallel.{key}", "must be a list of integers")
            kwargs[key] = tuple(kwargs[key])
    if "recompute" in kwargs:
        try:
            kwargs["recompute"] = Recompute(kwargs["recompute"])
        except ValueError:
            raise SpecError("parallel.recompute", "expected one of none, selective, full") from None
    if "zero_stage" in kwargs:
        if isinstance(kwargs["zero_stage"], bool) or kwargs["zero_stage"] not in (0, 1, 2, 3):
            raise SpecError("parallel.zero_stage", f"must be 0, 1, 2 or 3, got {kwargs['zero_stage']!r}")
        kwargs["zero_stage"] = ZeroStage(kwargs["zero_stage"])
    if "sequence_parallel" in kwargs and not isinstance(kwargs["sequence_parallel"], bool):
        raise SpecError("parallel.sequence_parallel", "must be true or false")
    return ParallelConfig(**kwargs)
