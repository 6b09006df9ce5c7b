"""What an evaluation returns: prediction, memory per stage, feasibility, as plain dataclasses.

``to_dict`` gives the JSON form the service and CLI print (GiB and seconds at this edge).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields

from solver.cost.uncertainty import PredictionRange
from solver.spec.rules import Violation

GIB_BYTES = 2**30

class _FieldMapping(Mapping[str, float]):
    """Read a frozen dataclass of float fields as a mapping of field name -> value too, in field
    order (the JSON edge and older callers index breakdowns by name)."""

    def __getitem__(self, key: str) -> float:
        if key not in self._names():
            raise KeyError(key)
        return float(getattr(self, key))

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    @classmethod
    @functools.cache
    def _names(cls) -> tuple[str, ...]:
        """The field names, read once per class (peak memory is summed on the search's hot path)."""
        return tuple(f.name for f in fields(cls))  # type: ignore[arg-type]


@dataclass(frozen=True)
class StageMemory(_FieldMapping):
    """Peak memory of one stage's GPU by what holds it, in bytes."""

    weights: float
    gradients: float
    optimizer_states: float
    activations: float  # transformer layers' activations in flight + the recompute working set
    embedding_and_logits: float
    zero3_gather_buffers: float
    # What the gradients' copy after backward (the optimizer step's, or the reduce's cast: stage.step_copy_bytes)
    # adds beyond the backward's transient memory (stage.step_peak_excess_bytes)
    optimizer_step_copy: float
    reserve: float  # runtime reserve + allocator fragmentation

    @property
    def peak_bytes(self) -> float:
        """The sum of the fields in field order (``sum(self.values())``, read straight off the
        fields: the search asks for it thousands of times)."""
        return sum([float(getattr(self, name)) for name in self._names()])


@dataclass(frozen=True)
class StepBreakdown(_FieldMapping):
    """What one step's time is made of, in seconds (``BREAKDOWN_KEYS`` order); the parts add
    up to the step time."""

    compute_s: float  # forward + backward of all micro-batches on the slowest stage (no comm)
    recompute_s: float  # extra forward work from activation recomputation
    tp_comm_s: float  # tensor / sequence parallel collectives and the exposed context-parallel ring exchange
    pp_comm_s: float  # pipeline point-to-point sends on the critical path
    dp_comm_exposed_s: float  # data-parallel gradient sync and ZeRO gathers not hidden by compute
    grad_accumulation_s: float  # adding each micro-batch's gradients into the fp32 buffer
    bubble_s: float  # pipeline fill and drain
    optimizer_s: float  # optimizer step over the local shard


# The JSON keys of both, in the order they are reported.
BREAKDOWN_KEYS = tuple(f.name for f in fields(StepBreakdown))
MEMORY_KEYS = tuple(f.name for f in fields(StageMemory))


def device_held_bytes(peak_bytes: float, segment_bytes: float, capacity_bytes: float) -> float:
    """What a GPU holds at most through the caching allocator and the runtime: a stage's peak and
    the segments its buffers after backward take beside it (``StageReport.step_segment_bytes``),
    never more than the GPU has (the allocator frees its cached blocks and retries before it
    fails). The figure nvidia-smi shows; less the runtime reserve, PyTorch's max reserved."""
    return min(peak_bytes + segment_bytes, capacity_bytes)


@dataclass(frozen=True)
class StageReport:
    """One pipeline stage (one GPU of it; all chunks of that GPU when interleaved)."""

    stage: int
    layers: tuple[int, ...]  # transformer layer indices on this GPU, in order
    full_recompute_layers: tuple[int, ...]
    has_embedding: bool
    has_head: bool
    time_per_micro_batch_s: float  # forward + backward (+ recompute) + TP comm, all chunks
    in_flight_micro_batches: float
    memory_bytes: StageMemory
    parameter_count: int
    # The buffers after backward the caching allocator reserves beside the peak
    # (solver.cost.stage.step_copy_segment_bytes); not part of the peak plans are checked against.
    step_segment_bytes: float = 0.0

    @property
    def peak_bytes(self) -> float:
        return self.memory_bytes.peak_bytes

    def to_dict(self) -> dict:
        return {
            "stage": self.stage,
            "num_layers": len(self.layers),
            "layers": list(self.layers),
            "full_recompute_layers": list(self.full_recompute_layers),
            "has_embedding": self.has_embedding,
            "has_head": self.has_head,
            "time_per_micro_batch_s": self.time_per_micro_batch_s,
            "in_flight_micro_batches": self.in_flight_micro_batches,
            "parameter_count": self.parameter_count,
            "peak_gib": self.peak_bytes / GIB_BYTES,
            "breakdown_gib": {k: self.memory_bytes.get(k, 0.0) / GIB_BYTES for k in MEMORY_KEYS},
        }


@dataclass(frozen=True)
class Prediction:
    step_time_s: float
    tokens_per_s: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float
    hfu: float
    time_to_train_s: float | None
    breakdown_s: StepBreakdown
    samples_per_s: float = 0.0
    range: PredictionRange | None = None  # from measured runs' residuals (solver.cost.uncertainty)

    def to_dict(self) -> dict:
        return {
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "samples_per_s": self.samples_per_s,
            "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "hardware_tflops_per_gpu": self.hardware_tflops_per_gpu,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "time_to_train_s": self.time_to_train_s,
            "breakdown_s": {k: self.breakdown_s.get(k, 0.0) for k in BREAKDOWN_KEYS},
            "range": self.range.to_dict() if self.range is not None else None,
        }


@dataclass(frozen=True)
class Evaluation:
    """The evaluator's verdict on one configuration."""

    feasible: bool
    violations: tuple[Violation, ...]
    prediction: Prediction
    stages: tuple[StageReport, ...]
    capacity_bytes: float
    peak_stage: int
    num_micro_batches: int
    profile_origins: dict[str, str] = field(default_factory=dict)
    host_bytes_per_node: float = 0.0  # host memory offloaded states take on one node (solver.cost.offload)
    nvme_bytes_per_node: float = 0.0  # NVMe offloaded states take on one node (solver.cost.offload)

    @property
    def peak_bytes(self) -> float:
        return max((s.peak_bytes for s in self.stages), default=0.0)

    @property
    def reserved_bytes(self) -> float:
        """The largest ``device_held_bytes`` over the stages: the figure nvidia-smi shows."""
        return max((device_held_bytes(s.peak_bytes, s.step_segment_bytes, self.capacity_bytes) for s in self.stages), default=0.0)

    def memory_to_dict(self) -> dict:
        peak = self.stages[self.peak_stage] if self.stages else None
        return {
            "peak_gib": self.peak_bytes / GIB_BYTES,
            "reserved_gib": self.reserved_bytes / GIB_BYTES,
            "capacity_gib": self.capacity_bytes / GIB_BYTES,
            "peak_stage": self.peak_stage,
            "breakdown_gib": (
                {k: peak.memory_bytes.get(k, 0.0) / GIB_BYTES for k in MEMORY_KEYS} if peak else {}
            ),
            "per_stage": [
                {"stage": s.stage, "peak_gib": s.peak_bytes / GIB_BYTES} for s in self.stages
            ],
            "host_gib_per_node": self.host_bytes_per_node / GIB_BYTES,
            "nvme_gbytes_per_node": self.nvme_bytes_per_node / 1e9,
        }

    def to_dict(self) -> dict:
        return {
            "feasible": self.feasible,
            "violations": list(self.violations),
            "prediction": self.prediction.to_dict() if self.prediction else None,
            "memory": self.memory_to_dict(),
            "stages": [s.to_dict() for s in self.stages],
            "num_micro_batches": self.num_micro_batches,
            "profile_origins": dict(self.profile_origins),
        }
