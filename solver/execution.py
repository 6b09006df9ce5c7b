"""How the model is trained and split: training settings and one parallel configuration."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum

from solver.errors import SpecError


class Precision(str, Enum):
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"  # FP8 GEMMs (Transformer Engine style); weights and grads still kept in 16 bit


class OptimizerKind(str, Enum):
    ADAM = "adam"  # Adam / AdamW: fp32 master weights, momentum and variance
    SGD = "sgd"  # SGD with momentum: fp32 master weights and momentum


class Recompute(str, Enum):
    NONE = "none"
    SELECTIVE = "selective"  # Korthikanti et al. 2022: recompute the attention core only
    FULL = "full"  # keep only each layer's input, recompute the whole layer


class ZeroStage(IntEnum):
    NONE = 0
    OS = 1  # optimizer states sharded over data parallel ranks
    OS_G = 2  # + gradients
    OS_G_P = 3  # + parameters


class Framework(str, Enum):
    """Which training framework's rules the plan must obey (see ``solver.legality``)."""

    ANY = "any"
    MEGATRON = "megatron"
    DEEPSPEED = "deepspeed"
    FSDP = "fsdp"


def _positive_int(field: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SpecError(field, f"must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class TrainingSpec:
    """Training settings shared by every configuration of one request.

    ``flash_attention`` says whether attention scores are materialised (False: the s x s score,
    softmax and dropout tensors go through HBM, as in Megatron-LM 2021-2022) or computed in a
    fused kernel that keeps them on chip (Dao et al. 2022, the default in current frameworks).

    ``overlap_grad_reduce`` says whether the data-parallel gradient reduction (ZeRO 0-2) runs
    bucket by bucket while the last backward pass is still computing (PyTorch DDP and FSDP,
    Megatron-core's ``overlap_grad_reduce``, DeepSpeed ZeRO's ``overlap_comm``) or only after it
    ends (False: Megatron-LM 2021-2022's local DDP calls ``allreduce_gradients`` after
    ``forward_backward_func`` returns; DeepSpeed's pipeline engine schedules ``ReduceGrads``
    after the last ``BackwardPass``).

    ``fused_kernels`` says whether the element-wise work around the GEMMs runs in fused kernels
    (Megatron-LM / Transformer Engine: fused scale-mask-softmax, bias-GeLU, bias-dropout-add) or
    as one eager PyTorch kernel per operation, each reading and writing its tensors through HBM
    (False: e.g. NVIDIA DeepLearningExamples BERT, Hugging Face style model code). See
    ``solver.analytic`` for the bytes each choice moves.
    """

    global_batch_size: int
    seq_length: int
    precision: Precision = Precision.BF16
    optimizer: OptimizerKind = OptimizerKind.ADAM
    train_tokens: float | None = None
    flash_attention: bool = True
    overlap_grad_reduce: bool = True
    fused_kernels: bool = True

    def __post_init__(self) -> None:
        _positive_int("training.global_batch_size", self.global_batch_size)
        _positive_int("training.seq_length", self.seq_length)
        object.__setattr__(self, "precision", Precision(self.precision))
        object.__setattr__(self, "optimizer", OptimizerKind(self.optimizer))
        if self.train_tokens is not None and not self.train_tokens > 0:
            raise SpecError("training.train_tokens", "must be positive")

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_size * self.seq_length


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
            _positive_int(f"parallel.{name}", getattr(self, name))
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
