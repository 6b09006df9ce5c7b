"""The parallel dimensions, each stated once: its name, the values it takes, how the API spells
it, and how a request pins or bounds it.

Every list of dimensions elsewhere is read from ``DIMENSIONS``: the API's ``parallel`` object
(``solver.spec.parallel.parallel_to_dict`` / ``parallel_from_dict``), the search constraints
(``solver.search.request.Constraints``), the validator's pin check and the explanation's
"lift the constraint" suggestions. Adding a dimension means adding a ``ParallelConfig`` field, a
``Dimension`` here, and the physics it changes (cost model and search space); nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from solver.spec.errors import SpecError
from solver.spec.training import Recompute, ZeroStage


class Kind(str, Enum):
    """What values a dimension takes."""

    COUNT = "count"  # a positive integer (a group size, a micro-batch, chunks per stage)
    ZERO = "zero"  # a ZeRO stage, 0-3
    RECOMPUTE = "recompute"  # none, selective, full
    FLAG = "flag"  # true or false
    OFFLOAD = "offload"  # what lives in host memory: none, optimizer, optimizer+params(+activations)
    NVME = "nvme"  # which offloaded model states live on NVMe instead: none, optimizer, optimizer+params
    LAYERS = "layers"  # a number of transformer layers, 0 or more


class Offload(str, Enum):
    """What is kept in host memory instead of the GPU's (``solver.cost.offload``).

    OPTIMIZER: ZeRO-Offload (Ren et al. 2021, arXiv 2101.06840): fp32 master weights, momentum,
    variance and gradients on the host, Adam stepped by the CPU, 16-bit gradients sent down and
    16-bit parameters up over PCIe each step. OPTIMIZER_PARAMS: ZeRO-Infinity (Rajbhandari et
    al. 2021, arXiv 2104.07857) also keeps the 16-bit parameters on the host and streams each
    layer's up before it runs, as ZeRO-3 gathers them. OPTIMIZER_PARAMS_ACTIVATIONS: ZeRO-Infinity's
    activation checkpoints offloaded too (Sec 5: the inputs kept by recomputed layers go to host
    memory in forward and come back in backward; DeepSpeed's activation_checkpointing.cpu_checkpointing).
    """

    NONE = "none"
    OPTIMIZER = "optimizer"
    OPTIMIZER_PARAMS = "optimizer+params"
    OPTIMIZER_PARAMS_ACTIVATIONS = "optimizer+params+activations"

    @property
    def offloads_params(self) -> bool:
        """Whether the 16-bit parameters leave the GPU too (ZeRO-Infinity's parameter offload,
        DeepSpeed's offload_param)."""
        return self in (Offload.OPTIMIZER_PARAMS, Offload.OPTIMIZER_PARAMS_ACTIVATIONS)


class NvmeOffload(str, Enum):
    """Which of the offloaded model states (``Offload``) live on the node's NVMe drives instead of
    its host memory (ZeRO-Infinity, Rajbhandari et al. 2021, arXiv 2104.07857; ``solver.cost.offload``).

    OPTIMIZER: the fp32 master weights, optimizer states and fp32 gradients (DeepSpeed's
    ``offload_optimizer.device: nvme``); the CPU still steps them, through pinned swap buffers.
    OPTIMIZER_PARAMS: the 16-bit parameters too (``offload_param.device: nvme``; needs parameter
    offload). Nested as ``Offload`` is: the optimizer's 16 bytes per parameter go first, the
    parameters' 2 only with them. Activation checkpoints never go to NVMe (ZeRO-Infinity and
    DeepSpeed move them to host memory only).
    """

    NONE = "none"
    OPTIMIZER = "optimizer"
    OPTIMIZER_PARAMS = "optimizer+params"


@dataclass(frozen=True)
class Dimension:
    """One dimension of a parallel configuration.

    ``relax_rank`` orders the explanation's suggestions to lift a pin on it, the smallest change
    first (None: never suggested). ``of_config`` is False for a dimension a request may pin
    that is not a field of ``ParallelConfig`` (the GPU count). ``follows`` names the dimension
    whose value this one takes when it is not given (``expert_tp_size``: ``tp_size``, as
    Megatron-core's expert_tensor_parallel_size defaults to tp): ``ParallelConfig`` then holds
    None for it, and ``value_of`` reads the value it stands for.
    """

    name: str
    kind: Kind
    description: str
    relax_rank: int | None = None
    of_config: bool = True
    follows: str | None = None

    def value_of(self, parallel: Any) -> Any:
        """This dimension's value in ``parallel`` (a ``follows`` dimension left unset: the value
        of the dimension it follows)."""
        value = getattr(parallel, self.name)
        if value is None and self.follows is not None:
            return getattr(parallel, self.follows)
        return value

    @property
    def ranged(self) -> bool:
        """Whether a request may bound it with {"min": a, "max": b}."""
        return self.kind in (Kind.COUNT, Kind.ZERO, Kind.LAYERS)

    def to_api(self, value: Any) -> Any:
        """The JSON value: an integer, a string or a boolean."""
        if self.kind is Kind.ZERO:
            return int(value)
        if self.kind is Kind.RECOMPUTE:
            return Recompute(value).value
        if self.kind is Kind.OFFLOAD:
            return Offload(value).value
        if self.kind is Kind.NVME:
            return NvmeOffload(value).value
        return value

    def constraint_value(self, value: Any, field: str) -> Any:
        """A value a request's constraint names, checked, in its JSON form."""
        if self.kind is Kind.FLAG:
            if not isinstance(value, bool):
                raise SpecError(field, f"expected true or false, got {value!r}")
            return value
        if self.kind is Kind.RECOMPUTE:
            try:
                return Recompute(value).value
            except ValueError:
                raise SpecError(field, f"expected one of none, selective, full, got {value!r}") from None
        if self.kind is Kind.OFFLOAD:
            try:
                return Offload(value).value
            except ValueError:
                raise SpecError(field, f"expected one of {_OFFLOAD_NAMES}, got {value!r}") from None
        if self.kind is Kind.NVME:
            try:
                return NvmeOffload(value).value
            except ValueError:
                raise SpecError(field, f"expected one of {_NVME_NAMES}, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(field, f"expected an integer, got {value!r}")
        if self.kind is Kind.ZERO and value not in (0, 1, 2, 3):
            raise SpecError(field, f"ZeRO stage must be 0-3, got {value}")
        if self.kind is Kind.COUNT and value < 1:
            raise SpecError(field, f"must be at least 1, got {value}")
        if self.kind is Kind.LAYERS and value < 0:
            raise SpecError(field, f"must be 0 or more, got {value}")
        return value

    def config_value(self, value: Any, field: str) -> Any:
        """A value of the API's ``parallel`` object, as ``ParallelConfig`` takes it (counts are
        checked by ``ParallelConfig`` itself)."""
        if self.kind is Kind.RECOMPUTE:
            try:
                return Recompute(value)
            except ValueError:
                raise SpecError(field, "expected one of none, selective, full") from None
        if self.kind is Kind.OFFLOAD:
            try:
                return Offload(value)
            except ValueError:
                raise SpecError(field, f"expected one of {_OFFLOAD_NAMES}") from None
        if self.kind is Kind.NVME:
            try:
                return NvmeOffload(value)
            except ValueError:
                raise SpecError(field, f"expected one of {_NVME_NAMES}") from None
        if self.kind is Kind.ZERO:
            if isinstance(value, bool) or value not in (0, 1, 2, 3):
                raise SpecError(field, f"must be 0, 1, 2 or 3, got {value!r}")
            return ZeroStage(value)
        if self.kind is Kind.FLAG and not isinstance(value, bool):
            raise SpecError(field, "must be true or false")
        if self.kind is Kind.LAYERS and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise SpecError(field, f"must be an integer, 0 or more, got {value!r}")
        return value


_OFFLOAD_NAMES = ", ".join(mode.value for mode in Offload)
_NVME_NAMES = ", ".join(mode.value for mode in NvmeOffload)

DIMENSIONS: tuple[Dimension, ...] = (
    Dimension("dp_size", Kind.COUNT, "data-parallel replicas", relax_rank=5),
    Dimension("tp_size", Kind.COUNT, "tensor-parallel group size (Megatron-LM column/row split)", relax_rank=3),
    Dimension("pp_size", Kind.COUNT, "pipeline stages", relax_rank=4),
    Dimension(
        "cp_size", Kind.COUNT,
        "context-parallel group size: each sequence split over cp ranks, K and V passed round a ring (Megatron-core, torchtitan)",
        relax_rank=8,
    ),
    Dimension(
        "ep_size", Kind.COUNT,
        "expert-parallel group size: each MoE layer's experts split over ep of the data-parallel ranks, tokens"
        " dispatched to them by all-to-all (Megatron-core, torchtitan, DeepSpeed-MoE); 1 for dense models",
        relax_rank=9,
    ),
    Dimension(
        "expert_tp_size", Kind.COUNT,
        "expert tensor-parallel group size: each routed expert's GEMMs split over this many ranks (Megatron-core"
        " --expert-tensor-parallel-size, torchtitan expert_tensor_parallel_degree); the ep x expert_tp_size ranks of"
        " an expert group are carved from the tp x dp x cp ranks; null: tp_size (Megatron-core's default)",
        relax_rank=10, follows="tp_size",
    ),
    Dimension("zero_stage", Kind.ZERO, "ZeRO stage: 0 none, 1 optimizer states, 2 + gradients, 3 + parameters", relax_rank=1),
    Dimension("micro_batch_size", Kind.COUNT, "sequences per micro-batch", relax_rank=2),
    Dimension("recompute", Kind.RECOMPUTE, "activation recomputation: none, selective or full", relax_rank=0),
    Dimension("virtual_stages", Kind.COUNT, "model chunks per pipeline stage (interleaved 1F1B)", relax_rank=6),
    Dimension("sequence_parallel", Kind.FLAG, "sequence parallelism inside the tensor-parallel group", relax_rank=7),
    # Never suggested by an explanation: the search itself turns to offload where nothing else fits.
    Dimension(
        "offload", Kind.OFFLOAD,
        "what is kept in host memory: none; optimizer (ZeRO-Offload: fp32 optimizer states and gradients, Adam on the CPU);"
        " optimizer+params (ZeRO-Infinity: 16-bit parameters too, streamed to the GPU layer by layer);"
        " optimizer+params+activations (the checkpoints of fully recomputed layers too)",
    ),
    # Never suggested either: like offload, the search turns to it only where nothing fits without.
    Dimension(
        "activation_offload_layers", Kind.LAYERS,
        "transformer layers whose activations go to host memory in forward and come back for backward"
        " (Megatron-core cpu_offloading_num_layers through Transformer Engine's CPU offload: the first N layers,"
        " one pipeline stage, no recomputation); 0: none",
    ),
    # Never suggested either: the search turns to NVMe only where host-memory offload fits nothing.
    Dimension(
        "nvme_offload", Kind.NVME,
        "which offloaded model states live on the nodes' NVMe drives instead of host memory (ZeRO-Infinity, DeepSpeed"
        " ZeRO-3): none; optimizer (fp32 optimizer states and gradients, offload_optimizer.device nvme);"
        " optimizer+params (the 16-bit parameters too, offload_param.device nvme)",
    ),
)
NUM_GPUS = Dimension("num_gpus", Kind.COUNT, "GPUs used (dp x tp x pp x cp)", of_config=False)
PINNABLE: dict[str, Dimension] = {d.name: d for d in (*DIMENSIONS, NUM_GPUS)}


def config_values(parallel: Any, num_gpus: int) -> dict[str, Any]:
    """Every pinnable dimension's JSON value for a configuration on ``num_gpus`` GPUs."""
    values = {d.name: d.to_api(d.value_of(parallel)) for d in DIMENSIONS}
    values[NUM_GPUS.name] = num_gpus
    return values


def relaxable() -> list[Dimension]:
    """Dimensions an explanation may suggest un-pinning, smallest change first."""
    return sorted((d for d in DIMENSIONS if d.relax_rank is not None), key=lambda d: d.relax_rank or 0)
