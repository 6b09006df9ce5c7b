"""One way to split the training job (``ParallelConfig``) and its API dict form."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from solver.spec.dimensions import DIMENSIONS, Kind, NvmeOffload, Offload
from solver.spec.errors import SpecError, check_positive_int
from solver.spec.training import Recompute, ZeroStage

PER_CHUNK_FIELDS = ("stage_layers", "full_recompute_layers")  # lists of one integer per model chunk


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
    cp_size: int = 1  # last: positional construction (dp, tp, pp, ...) predates it
    ep_size: int = 1  # expert parallelism: carved from the dp x cp ranks (``expert_dp_size``)
    offload: Offload = Offload.NONE  # model states kept in host memory (solver.cost.offload)
    activation_offload_layers: int = 0  # the first N layers' activations kept in host memory (solver.cost.offload)
    # Ranks each routed expert's GEMMs are split over (``etp_size``); None: tp_size, Megatron-core's
    # default. Held as None whenever it equals tp_size, so that equal configurations compare equal.
    expert_tp_size: int | None = None
    nvme_offload: NvmeOffload = NvmeOffload.NONE  # offloaded model states kept on NVMe instead (solver.cost.offload)

    def __post_init__(self) -> None:
        # The search builds thousands of these: each check is skipped where the value already
        # is what it asks for (a positive int, a non-negative int, the enum member).
        for dimension in DIMENSIONS:
            if dimension.kind is Kind.COUNT:
                value = getattr(self, dimension.name)
                if type(value) is not int or value < 1:
                    if value is None and dimension.follows is not None:
                        continue
                    check_positive_int(f"parallel.{dimension.name}", value)
            elif dimension.kind is Kind.LAYERS:
                value = getattr(self, dimension.name)
                if type(value) is not int or value < 0:
                    dimension.config_value(value, f"parallel.{dimension.name}")
        if type(self.zero_stage) is not ZeroStage:
            try:
                object.__setattr__(self, "zero_stage", ZeroStage(self.zero_stage))
            except ValueError:
                raise SpecError("parallel.zero_stage", f"must be 0, 1, 2 or 3, got {self.zero_stage!r}") from None
        if type(self.recompute) is not Recompute:
            object.__setattr__(self, "recompute", Recompute(self.recompute))
        if type(self.offload) is not Offload:
            object.__setattr__(self, "offload", Offload(self.offload))
        if self.expert_tp_size == self.tp_size:
            object.__setattr__(self, "expert_tp_size", None)
        if type(self.nvme_offload) is not NvmeOffload:
            object.__setattr__(self, "nvme_offload", NvmeOffload(self.nvme_offload))
        for name in PER_CHUNK_FIELDS:
            values = getattr(self, name)
            if values is not None:
                object.__setattr__(self, name, self._per_chunk(name, values))

    def _per_chunk(self, name: str, given: Iterable[Any]) -> tuple[int, ...]:
        """A per-chunk list (one non-negative integer per model chunk, pipeline order)."""
        values = tuple(given)
        if len(values) != self.num_chunks:
            raise SpecError(
                f"parallel.{name}", f"needs pp_size * virtual_stages = {self.num_chunks} entries, got {len(values)}"
            )
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in values):
            raise SpecError(f"parallel.{name}", "entries must be non-negative integers")
        return values

    @property
    def num_gpus(self) -> int:
        return self.dp_size * self.tp_size * self.pp_size * self.cp_size

    @property
    def dp_cp_size(self) -> int:
        """Ranks that hold the same parameters: gradients are reduced, and ZeRO shards model
        states, over the data-parallel and context-parallel ranks together (Megatron-core's
        ``data_parallel_group_with_context_parallel``, which its DDP and distributed optimizer
        use; torchtitan's FSDP mesh ``dp_shard_cp``). Parameters are replicated over cp."""
        return self.dp_size * self.cp_size

    @property
    def etp_size(self) -> int:
        """Ranks each routed expert's GEMMs are split over: ``expert_tp_size``, or tp_size when it
        is not set (Megatron-core's expert_tensor_parallel_size defaults to tp)."""
        return self.tp_size if self.expert_tp_size is None else self.expert_tp_size

    @property
    def expert_dp_size(self) -> int:
        """Ranks that hold the same experts: expert gradients are reduced, and ZeRO shards expert
        states, over tp x dp x cp / (ep x etp) of them. Expert parallelism takes no GPUs of its
        own: the ep x etp ranks of an expert group are carved out of the tp x dp x cp ranks of a
        pipeline stage, and each holds num_experts / ep of every MoE layer's experts, each
        expert split over etp ranks (Megatron-core ``parallel_state.initialize_model_parallel``
        at NVIDIA/Megatron-LM 8f1c2f8ae: expert data-parallel size = world / (pp x
        expert_tensor_parallel_size x expert_model_parallel_size), its expert rank grid
        tp-ep-dp-pp with expert_tensor_parallel_size in tp's place). With etp = tp, the default,
        that is dp x cp / ep and an EP group's ranks are tp apart; with etp 1 an EP group is ep
        consecutive ranks, its dense TP groups included. Exact once ``check_structure`` has
        passed (ep x etp divides tp x dp x cp)."""
        return self.tp_size * self.dp_cp_size // (self.ep_size * self.etp_size)

    def layout_text(self, sep: str = ", ") -> str:
        """The split in words: ``tp 2, cp 2, pp 4, dp 4``, every dimension whose product is the
        GPU count (cp only where it splits), then the experts' own split where there is one
        (``ep 8``, and ``expert tp 1`` where the experts are not split over tp): expert
        parallelism is carved from the tp x dp x cp ranks, so it is named apart from the factors."""
        words = [f"tp {self.tp_size}"] + ([f"cp {self.cp_size}"] if self.cp_size > 1 else [])
        words += [f"pp {self.pp_size}", f"dp {self.dp_size}"]
        if self.ep_size > 1:
            words.append(f"ep {self.ep_size}")
        if self.expert_tp_size is not None:
            words.append(f"expert tp {self.expert_tp_size}")
        return sep.join(words)

    @property
    def num_chunks(self) -> int:
        """Model chunks in pipeline order (pp_size for 1F1B, pp_size * v when interleaved)."""
        return self.pp_size * self.virtual_stages


def micro_batch_count(global_batch_size: int, dp_size: int, micro_batch_size: int) -> int:
    """Micro-batches each data-parallel replica runs per step: B / (dp * mb) (exact once
    ``check_structure`` has passed)."""
    return global_batch_size // (dp_size * micro_batch_size)


def parallel_to_dict(parallel: ParallelConfig) -> dict[str, Any]:
    """The API's ``parallel`` object: every dimension (``solver.spec.dimensions``; one that follows
    another written as the value it stands for), then the per-chunk lists (null when uniform)."""
    out = {d.name: d.to_api(d.value_of(parallel)) for d in DIMENSIONS}
    for name in PER_CHUNK_FIELDS:
        values = getattr(parallel, name)
        out[name] = list(values) if values else None
    return out


def parallel_from_dict(raw: dict[str, Any]) -> ParallelConfig:
    """The API's ``parallel`` object; unknown keys are an error naming the key."""
    known = {d.name for d in DIMENSIONS} | set(PER_CHUNK_FIELDS)
    unknown = set(raw) - known
    if unknown:
        raise SpecError(f"parallel.{sorted(unknown)[0]}", f"unknown field; known: {', '.join(sorted(known))}")
    kwargs = {k: v for k, v in raw.items() if v is not None}
    for key in PER_CHUNK_FIELDS:
        if key in kwargs:
            if not isinstance(kwargs[key], list):
                raise SpecError(f"parallel.{key}", "must be a list of integers")
            kwargs[key] = tuple(kwargs[key])
    for d in DIMENSIONS:
        if d.name in kwargs:
            kwargs[d.name] = d.config_value(kwargs[d.name], f"parallel.{d.name}")
    return ParallelConfig(**kwargs)
