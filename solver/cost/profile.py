"""The per-layer profile: the one currency between the cost model and the optimizer.

As in PipeDream's optimizer (Narayanan et al. 2019), a model is a chain of layers, each with a
forward and backward time, the activation bytes it keeps for backward, its parameters and the
bytes it sends to the next layer. The analytic model (``solver.cost.analytic``) produces a profile;
a measured one (``solver.io.profile_format``) can replace it. Every number is for ONE micro-batch on
ONE GPU of a tensor-parallel group of ``tp_size``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from enum import Enum
from functools import cached_property
from typing import Any, Protocol

from solver.spec.training import Precision, Recompute


class LayerKind(str, Enum):
    EMBEDDING = "embedding"  # token (+ position) embedding, runs on the first stage
    TRANSFORMER = "transformer"  # one attention + MLP block
    HEAD = "head"  # final norm, output projection (logits) and loss, runs on the last stage


class Origin(str, Enum):
    ANALYTIC = "analytic"  # from the formulas in solver.cost.analytic
    MEASURED = "measured"  # taken from a measured profile as is
    DERIVED = "derived"  # measured at another tp_size / micro-batch, scaled by analytic ratios


# LayerProfile's fields by unit: seconds and bytes.
TIME_FIELDS = ("forward_s", "backward_s", "selective_recompute_s", "tp_comm_s")
BYTE_FIELDS = ("activation_bytes", "selective_activation_bytes", "checkpoint_bytes", "output_bytes")


@dataclass(frozen=True)
class LayerProfile:
    """Costs of one layer for one micro-batch on one GPU.

    Times in seconds exclude tensor-parallel communication, which is ``tp_comm_s`` (forward and
    backward together). ``selective_recompute_s`` is the extra forward work of the attention
    core when it is recomputed (Korthikanti et al. 2022); a full recompute costs ``forward_s``
    again. Activation bytes are what the layer keeps for its backward pass under each recompute
    choice: none, selective, full (full keeps only the layer's input checkpoint).
    """

    name: str
    kind: LayerKind
    forward_s: float
    backward_s: float
    parameter_count: int  # parameters held by this GPU (already divided by tp_size)
    activation_bytes: int
    selective_activation_bytes: int
    checkpoint_bytes: int
    output_bytes: int  # sent to the next layer (the pipeline p2p message if a stage ends here)
    selective_recompute_s: float = 0.0
    tp_comm_s: float = 0.0
    model_flops: float = 0.0  # useful FLOPs of forward + backward (for MFU), this GPU
    origin: Origin = Origin.ANALYTIC
    # Context parallelism's ring attention exchange that attention compute does not hide, forward
    # (K, V) and backward (K, V and their gradients) together; 0 at cp_size 1. Kept apart from
    # the measured fields (the profile format has no CP): it always comes from the analytic model.
    cp_comm_s: float = 0.0
    # Expert parallelism (MoE layers): the token dispatch and combine all-to-alls, forward (2) and
    # backward (2), not hidden by compute; 0 for dense layers and at ep_size 1. From the analytic
    # model, as cp_comm_s is.
    ep_comm_s: float = 0.0
    # Of ``parameter_count``, the routed experts' parameters this GPU holds (num_experts / ep of
    # them, tp-split): their gradients and ZeRO shards go over the expert-data-parallel ranks.
    expert_parameter_count: int = 0
    # Gradients alive beside the layer's kept (or recomputed) activations at the peak of its
    # backward: the residual stream's gradient and the largest set of input gradients its
    # backward nodes write before autograd frees their saved tensors (solver.cost.analytic
    # backward_working_bytes). From the analytic model; a measured profile carries none.
    backward_working_bytes: int = 0
    # The largest single parameter tensor of the layer this GPU holds (tp-split): the embedding
    # table, a layer's widest weight matrix. DeepSpeed's ZeRO-1/2 step copies one gradient at a
    # time to check and measure it (solver.cost.stage.step_phases). From the analytic model; 0
    # where a profile does not say (read as ``parameter_count``, an upper bound).
    largest_tensor_parameter_count: int = 0

    def recompute_s(self, mode: Recompute) -> float:
        """Extra time of recomputing this layer in ``mode``: a full recompute repeats the forward
        pass and its TP collectives (half of ``tp_comm_s``: 2 of the 4 per layer, Korthikanti et
        al. 2022 Sec 4) and its forward ring exchange (a third of ``cp_comm_s``: the forward
        moves K and V, the backward K, V and their gradients, twice the bytes) and its dispatch
        and combine all-to-alls (half of ``ep_comm_s``); a selective one the attention core."""
        if mode is Recompute.FULL:
            return self.forward_s + self.tp_comm_s / 2 + self.cp_comm_s / 3 + self.ep_comm_s / 2
        return self.selective_recompute_s if mode is Recompute.SELECTIVE else 0.0

    def time_s(self, mode: Recompute) -> float:
        """Forward + backward (+ recompute) time of this layer, TP, CP and EP communication included."""
        return self.forward_s + self.backward_s + self.tp_comm_s + self.cp_comm_s + self.ep_comm_s + self.recompute_s(mode)

    def kept_bytes(self, mode: Recompute) -> int:
        """Activation bytes kept for backward in ``mode`` (full: the layer's input only)."""
        if mode is Recompute.FULL:
            return self.checkpoint_bytes
        return self.selective_activation_bytes if mode is Recompute.SELECTIVE else self.activation_bytes


@dataclass(frozen=True)
class ProfileShape:
    """What of a parallel configuration a per-layer profile depends on: the tensor-parallel
    group a GPU's share is cut for, the micro-batch it runs, and whether norms and dropouts are
    split over the group (sequence parallelism), and the context-parallel group each sequence
    is split over (a GPU's layers see s / cp_size tokens of each sequence), and the
    expert-parallel group an MoE layer's experts are split over, and the expert tensor-parallel
    group each expert is split over (``ParallelConfig.expert_tp_size``: None when it is tp)."""

    tp_size: int = 1
    micro_batch_size: int = 1
    sequence_parallel: bool = False
    cp_size: int = 1
    ep_size: int = 1
    expert_tp_size: int | None = None

    def __hash__(self) -> int:
        """The dataclass's hash (of the fields in order), worked out once per instance: the search
        keys its caches by profile shape."""
        found = self.__dict__.get("_hash")
        if found is None:
            found = hash(tuple(getattr(self, name) for name in _PROFILE_SHAPE_FIELDS))
            self.__dict__["_hash"] = found  # not a field: equality and repr ignore it
        return found

    @staticmethod
    def of(parallel: Any) -> "ProfileShape":
        """The profile shape of a ``ParallelConfig`` (or anything with these fields)."""
        return ProfileShape(
            parallel.tp_size, parallel.micro_batch_size, parallel.sequence_parallel, parallel.cp_size, parallel.ep_size,
            parallel.expert_tp_size,
        )


_PROFILE_SHAPE_FIELDS = tuple(f.name for f in fields(ProfileShape))


class LayerChain(Protocol):
    """What the search's bounds and partition problems read of a profile: its chain of layers
    (``ModelProfile``, or the analytic model's ``solver.cost.analytic.AnalyticLayers``, whose
    transformer layers of one kind are one shared object)."""

    @property
    def layers(self) -> tuple[LayerProfile, ...]: ...

    @property
    def transformer_layers(self) -> tuple[LayerProfile, ...]: ...

    @property
    def embedding(self) -> LayerProfile | None: ...

    @property
    def head(self) -> LayerProfile | None: ...

    def origins(self) -> dict[str, str]: ...


@dataclass(frozen=True)
class ModelProfile:
    """A chain of layer profiles: embedding, transformer layers, head (in that order)."""

    model_name: str
    tp_size: int
    micro_batch_size: int
    seq_length: int
    precision: Precision
    layers: tuple[LayerProfile, ...]
    device: str = ""
    sequence_parallel: bool = False  # how it was measured (the analytic reference must match)
    flash_attention: bool = True
    notes: tuple[str, ...] = field(default=(), compare=False)
    cp_size: int = 1  # measured profiles are at 1; derived and analytic ones at their target

    @property
    def shape(self) -> ProfileShape:
        """The configuration it was measured (or derived) at."""
        return ProfileShape(self.tp_size, self.micro_batch_size, self.sequence_parallel, self.cp_size)

    # Worked out once per profile (the search and the evaluator ask for them thousands of times;
    # a frozen dataclass's fields never change).
    @cached_property
    def transformer_layers(self) -> tuple[LayerProfile, ...]:
        return tuple(layer for layer in self.layers if layer.kind is LayerKind.TRANSFORMER)

    @cached_property
    def embedding(self) -> LayerProfile | None:
        return next((layer for layer in self.layers if layer.kind is LayerKind.EMBEDDING), None)

    @cached_property
    def head(self) -> LayerProfile | None:
        return next((layer for layer in reversed(self.layers) if layer.kind is LayerKind.HEAD), None)

    def origins(self) -> dict[str, str]:
        return {layer.name: layer.origin.value for layer in self.layers}

    def with_layers(self, layers: tuple[LayerProfile, ...]) -> "ModelProfile":
        return replace(self, layers=layers)
