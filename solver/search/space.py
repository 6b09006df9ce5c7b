"""The optimizer's search space: the shapes it enumerates, their legality, and lower bounds.

A shape fixes everything but the partition: GPU count, dp / tp / pp / cp, ZeRO stage,
micro-batch, the base recompute (and whether layers may be fully recomputed), interleaving and
sequence parallelism. Bounds come from the per-layer profile alone (no evaluator call), so whole groups
of shapes can be skipped before anything is planned.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from dataclasses import InitVar, dataclass, field, fields, replace

from solver.cost.analytic import analytic_layers
from solver.cost.derive import resolve_profile
from solver.cost.profile import LayerChain, LayerProfile, ProfileShape
from solver.cost.result import Evaluation
from solver.cost.schedule import pipeline_comm_s, pipeline_slots
from solver.frameworks import framework_violations
from solver.partition.problem import PartitionProblem, PartitionSolution, layer_rows
from solver.search.request import Objective, SearchRequest
from solver.search.result import SearchStats
from solver.spec.dimensions import NvmeOffload, Offload
from solver.spec.errors import SpecError
from solver.spec.legality import check_structure, nvme_fits_offload, offload_zero_stage, placement_violations, tp_splits_model
from solver.spec.parallel import ParallelConfig, micro_batch_count
from solver.spec.rules import Rule, Violation
from solver.spec.training import OptimizerKind, Recompute, TrainingSpec, ZeroStage

# A search-space cap: at 256 sequences per micro-batch every GEMM already fills the GPU in
# solver.cost.compute's wave/k-efficiency model, so larger micro-batches only add activation memory.
MICRO_BATCH_CHOICES_MAX = 256
# Context parallelism is enumerated (unless a request's cp_size constraint names values) only
# for sequences of at least this many tokens, as powers of two that leave each rank at least
# CP_MIN_TOKENS_PER_RANK tokens of every sequence. Search-space caps, not physics: the cost model
# judges every cp it is given, but at 2K-4K tokens the ring's blocks are too small for attention
# to hide their K/V exchange (Megatron-core's and NeMo's long-context recipes start CP at 8K and
# keep 4K-8K tokens per rank; Llama 3's 128K stage ran cp 16, 8K tokens per rank).
CP_MIN_SEQ_LENGTH = 8192
CP_MIN_TOKENS_PER_RANK = 2048


# One ProfileShape object per value (an intern table, not a cache of results): the search's
# caches are keyed by profile shape, and a dict finds the very key object without comparing fields.
_PROFILE_SHAPES: dict[tuple, ProfileShape] = {}


@dataclass(frozen=True, order=True)
class Shape:
    """One point of the outer enumeration; the partition is planned per shape."""

    num_gpus: int
    dp_size: int
    tp_size: int
    pp_size: int
    zero_stage: int
    micro_batch_size: int
    base_recompute: Recompute  # NONE or SELECTIVE for every layer not fully recomputed
    full_recompute: bool  # may layers be fully recomputed (how many is chosen per stage)
    virtual_stages: int
    sequence_parallel: bool
    cp_size: int = 1
    ep_size: int = 1
    offload: Offload = Offload.NONE
    activation_offload_layers: int = 0  # the first N layers' activations in host memory (one stage)
    expert_tp_size: int = 0  # ranks each routed expert is split over; 0: tp_size (ParallelConfig.expert_tp_size None)
    nvme_offload: NvmeOffload = NvmeOffload.NONE  # what of the offloaded states is on NVMe instead of host memory

    @property
    def profile_shape(self) -> ProfileShape:
        """What of the shape its per-layer profile depends on (built once per shape, as ``uniform``)."""
        built = self.__dict__.get("_profile_shape")
        if built is None:
            values = (self.tp_size, self.micro_batch_size, self.sequence_parallel, self.cp_size, self.ep_size, self.expert_tp_size or None)
            built = _PROFILE_SHAPES.get(values)
            if built is None:
                built = _PROFILE_SHAPES[values] = ProfileShape(*values)
            self.__dict__["_profile_shape"] = built  # not a field: equality, order and hash ignore it
        return built

    def uniform(self) -> ParallelConfig:
        """The configuration with a uniform partition and every layer on the base recompute
        (built once per shape: the bounds, the partition and the plan each ask for it)."""
        built = self.__dict__.get("_uniform")
        if built is None:
            built = ParallelConfig(
                self.dp_size, self.tp_size, self.pp_size, ZeroStage(self.zero_stage), self.micro_batch_size,
                self.base_recompute, self.virtual_stages, self.sequence_parallel, cp_size=self.cp_size, ep_size=self.ep_size,
                offload=self.offload, activation_offload_layers=self.activation_offload_layers,
                expert_tp_size=self.expert_tp_size or None,
                nvme_offload=self.nvme_offload,
            )
            self.__dict__["_uniform"] = built  # not a field: equality, order and hash ignore it
        return built


_SHAPE_FIELDS = tuple(f.name for f in fields(Shape))


def _shape(*values: object) -> Shape:
    """``Shape(*values)``, every field given, without the frozen dataclass's ``__init__`` (one
    ``object.__setattr__`` per field): the search builds tens of thousands of shapes."""
    shape = object.__new__(Shape)
    shape.__dict__.update(zip(_SHAPE_FIELDS, values, strict=True))
    return shape


@dataclass
class SearchRun:
    """What one search accumulates: the request, the stats and the reasons shapes failed."""

    request: SearchRequest
    stats: SearchStats
    deadline: float
    rejected: dict[Rule, int] = field(default_factory=dict)  # rule -> shapes rejected by it
    validator_problems: list[str] = field(default_factory=list)  # what the validator refused (never expected)
    # Shapes that passed every rule, by the position of their group's micro-batch in the
    # enumeration (solver.search.loop builds a group's shapes when its bound is reached).
    legal_parts: list[tuple[int, list[Shape]]] = field(default_factory=list)
    positions: int = 0  # the (group, offload, micro-batch) entries numbered so far
    closest: list[tuple[float, ParallelConfig, Evaluation]] = field(default_factory=list)  # memory misses
    partitions_exact: bool = True
    # (pp, zero, cp, ep, offloads activations[, tp, etp where etp is not tp]) -> violations
    framework_rules: dict[tuple, list[Violation]] = field(default_factory=dict)
    states_fit: dict[tuple, bool] = field(default_factory=dict)  # (tp, ep, etp, pp, dp, cp, zero, offload) -> model states may fit
    step_bounds: dict[tuple, float] = field(default_factory=dict)  # step_lower_bound_s by what it reads of a shape
    selective_dominated: dict[tuple, bool] = field(default_factory=dict)  # dominated_selective by what it reads of a shape
    # partition problem -> (even partition, optimal partition): solved once (solver.search.loop._partitions)
    partitions: dict[PartitionProblem, tuple[PartitionSolution | None, PartitionSolution | None]] = field(default_factory=dict)
    # partition problem -> its even partition, kept where the optimal one was not solved (its plan would lose)
    even_partitions: dict[PartitionProblem, PartitionSolution | None] = field(default_factory=dict)
    # What the shapes may offload: none, unless the request names offload values; the search
    # widens it where nothing fits without (solver.search.loop.offload_fallback).
    offload_modes: tuple[Offload, ...] = (Offload.NONE,)
    # What of the offloaded states the shapes may keep on NVMe: none, unless the request names
    # nvme_offload values; widened where host-memory offload fits nothing (loop.nvme_fallback).
    nvme_modes: tuple[NvmeOffload, ...] = (NvmeOffload.NONE,)
    # Whether the search may offload activations of its own accord (searches_activation_offload);
    # None: not yet asked.
    activation_offload: bool | None = None
    # The training settings the request's framework would run a plan with instead of the
    # request's (solver.search.loop.framework_exact), and the fields that differ; None: none seen.
    framework_training: tuple[TrainingSpec, tuple[str, ...]] | None = None
    # The least objective bound of a shape whose planned configuration was replaced by the
    # framework's nearest exact one (solver.search.loop.framework_exact); inf: none was.
    replaced_bound: float = float("inf")
    profiles: "Profiles" = field(init=False)  # per-search profile caches
    # Another search's caches to share where they serve this request (a sweep's points).
    shared_profiles: InitVar["Profiles | None"] = None

    def __post_init__(self, shared_profiles: "Profiles | None") -> None:
        self.profiles = Profiles(self.request) if shared_profiles is None else shared_profiles.for_request(self.request)

    def reject(self, rule: Rule) -> None:
        self.rejected[rule] = self.rejected.get(rule, 0) + 1

    @property
    def legal(self) -> list[Shape]:
        """The legal shapes built, in enumeration order."""
        return [shape for _, part in sorted(self.legal_parts, key=lambda item: item[0]) for shape in part]


def gpu_counts(request: SearchRequest) -> list[int]:
    """GPU counts to consider: the request's, else those the num_gpus constraint admits among
    divisors and multiples of the node size up to the cluster (every GPU when unconstrained and
    the objective is not min_gpus)."""
    cluster = request.cluster
    if request.num_gpus is not None:
        return [request.num_gpus]
    rule = request.constraints.allowed.get("num_gpus")
    if rule is None and request.objective is not Objective.MIN_GPUS:
        return [cluster.num_gpus]
    node = cluster.gpus_per_node
    counts = {d for d in range(1, node + 1) if node % d == 0} | {node * i for i in range(1, cluster.num_nodes + 1)}
    if rule is not None and rule.values is not None:
        counts |= {int(v) for v in rule.values if v <= cluster.num_gpus}
    return sorted(n for n in counts if n <= cluster.num_gpus and request.constraints.admits("num_gpus", n))


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _recompute_options(request: SearchRequest) -> list[tuple[Recompute, bool]]:
    """(base recompute, full allowed) pairs the recompute constraint admits. Full recompute is
    chosen per stage (from none to every layer), so 'full' covers partial recomputation."""
    admits = lambda value: request.constraints.admits("recompute", value.value)  # noqa: E731
    options = []
    if admits(Recompute.NONE) or admits(Recompute.FULL):
        options.append((Recompute.NONE, admits(Recompute.FULL)))
    if admits(Recompute.SELECTIVE):
        options.append((Recompute.SELECTIVE, admits(Recompute.FULL)))
    return options


def cp_sizes(request: SearchRequest, ranks: int) -> list[int]:
    """Context-parallel sizes to consider for ``ranks`` GPUs per tensor-parallel rank: those a
    cp_size constraint names (every divisor it admits; legality is checked with the shape),
    else 1, and for sequences of at least CP_MIN_SEQ_LENGTH tokens the powers of two that split
    each sequence into 2 x cp equal chunks of which each rank keeps at least
    CP_MIN_TOKENS_PER_RANK tokens."""
    if "cp_size" in request.constraints.allowed:
        return [c for c in divisors(ranks) if request.constraints.admits("cp_size", c)]
    seq = request.training.seq_length
    sizes = [1]
    if seq < CP_MIN_SEQ_LENGTH or not request.training.flash_attention:
        return sizes  # short sequences; or materialised attention, which no framework runs with CP
    cp = 2
    while ranks % cp == 0 and seq % (2 * cp) == 0 and seq // cp >= CP_MIN_TOKENS_PER_RANK:
        sizes.append(cp)
        cp *= 2
    return sizes


def ep_sizes(request: SearchRequest, ranks: int) -> list[int]:
    """Expert-parallel sizes to consider where ``ranks`` (dp x cp) ranks can carry them: those an
    ep_size constraint admits among the divisors, else 1 for a dense model (its search is as
    before), and for an MoE model every divisor of ``ranks`` that divides the expert count
    (``check_structure`` judges the rest)."""
    if "ep_size" in request.constraints.allowed:
        return [e for e in divisors(ranks) if request.constraints.admits("ep_size", e)]
    model = request.model
    if not model.is_moe:
        return [1]
    return [e for e in divisors(ranks) if model.num_experts % e == 0]


def expert_tp_sizes(request: SearchRequest, tp: int, ranks: int) -> list[int]:
    """Expert tensor-parallel sizes to consider at tensor parallelism ``tp`` where ``ranks``
    (tp x dp x cp) ranks carry the expert groups, as ``Shape.expert_tp_size`` holds them (0: tp):
    those an expert_tp_size constraint admits among the divisors (``[1]``: whole experts at every
    tp; ``[1, 2]``: 1 or 2), else tp for a dense model or at tp 1, and for an MoE model tp and 1:
    Megatron-core's default (expert_tensor_parallel_size None: tp) and whole experts, as
    fine-grained MoE is trained (NVIDIA's DeepSeek-V3 H100 preset and NeMo's Mixtral 8x22B B200
    row set expert_tensor_parallel_size 1, bench/data/run_inputs.json; torchtitan's ParallelDims
    takes no other pair). Sizes between are searched only where the request names them.
    ``check_structure`` and the framework rules judge what is considered.

    Etp 1 doubles an MoE model's shapes at tp > 1, most of which cannot win: the groups' step
    bounds (shapes built only when theirs comes up) and the memory-aware partition bound
    (``solver.partition.tail.tail_bottleneck_lower_bound_ns``) keep them cheap. DeepSeek-V3 on
    2048 H800 (bench/search.py) finds tp 2, etp 1, ep 8 over pp 16, 33.8 s per step in the model
    against 34.5 s for the best plan at etp = tp, in 0.8 s of CPU against 0.5 s without etp 1."""
    if "expert_tp_size" in request.constraints.allowed:
        admitted = [e for e in divisors(ranks) if request.constraints.admits("expert_tp_size", e)]
        return [0 if e == tp else e for e in admitted]
    if not request.model.is_moe or tp == 1:
        return [0]
    return [0, 1]


@dataclass(eq=False)
class ShapeGroup:
    """The shapes of one (GPU count, dp, tp, pp, cp, ep, etp) that pass the rules no micro-batch,
    ZeRO stage or interleaving can repair, as ``members`` builds them per offload mode and
    micro-batch. The search bounds each micro-batch's shapes at once (``step_bound_floor_s``)
    and builds them only where that bound may still win (``solver.search.loop``)."""

    num_gpus: int
    dp_size: int
    tp_size: int
    pp_size: int
    cp_size: int
    ep_size: int
    expert_tp_size: int  # 0: tp_size (Shape.expert_tp_size)
    per_replica: int  # sequences per data-parallel replica per step
    micro_batches: list[int]
    recompute: list[tuple[Recompute, bool]]  # (base recompute, full allowed), _recompute_options
    virtual: list[int]  # interleaving the layer count allows
    seq_par: list[bool]
    # (offload, NVMe offload, the ZeRO stages paired with them), offload_options x nvme_options
    offloads: list[tuple[Offload, NvmeOffload, list[int]]]

    def _interleaves(self, v: int, mb: int) -> bool:
        """Whether ``v`` chunks per stage run at micro-batch ``mb`` (the interleaved schedule
        needs the micro-batch count to divide by pp)."""
        return v == 1 or (self.per_replica // mb) % self.pp_size == 0

    def members(self, run: SearchRun, offload_index: int, mb: int):
        """The group's shapes of offload mode ``offload_index`` and micro-batch ``mb``, in
        enumeration order (ZeRO stage, recompute, interleaving, SP, activation offload)."""
        offload, nvme, zero_stages = self.offloads[offload_index]
        no_activation_offload = [0] if "activation_offload_layers" not in run.request.constraints.allowed else None
        for zero, (base, full), v, sp in itertools.product(zero_stages, self.recompute, self.virtual, self.seq_par):
            if not self._interleaves(v, mb):
                run.reject(Rule.INTERLEAVE_MICRO_BATCHES)
                continue
            # Asked per shape only where the request names activation offload values
            # (the options then count what they turn down).
            for layers in no_activation_offload or activation_offload_options(run, self.pp_size, base):
                # Offloading layers' activations runs without recomputation (full: none).
                yield _shape(
                    self.num_gpus, self.dp_size, self.tp_size, self.pp_size, zero, mb, base, full and not layers, v, sp,
                    self.cp_size, self.ep_size, offload, layers, self.expert_tp_size, nvme,
                )

    def member_count(self, run: SearchRun, offload_index: int, mb: int) -> int:
        """How many shapes ``members`` builds for ``offload_index`` and ``mb`` (without building them)."""
        zero_stages = self.offloads[offload_index][2]
        interleaved = sum(1 for v in self.virtual if self._interleaves(v, mb))
        if "activation_offload_layers" in run.request.constraints.allowed:
            per_recompute = sum(len(_activation_offload_layers(run.request, self.pp_size, base)[0]) for base, _ in self.recompute)
        else:
            per_recompute = len(self.recompute)
        return len(zero_stages) * per_recompute * interleaved * len(self.seq_par)

    def step_bound_floor_s(self, run: SearchRun, mb: int) -> float:
        """The least ``step_lower_bound_s`` of the group's shapes of micro-batch ``mb`` (of every
        offload mode): the bound reads their base recompute, interleaving and SP, not their ZeRO
        stage, full recompute or offload, so one shape of each (base, v, sp) stands for the rest."""
        floor = float("inf")
        for base in dict.fromkeys(base for base, _ in self.recompute):
            for v in self.virtual:
                if not self._interleaves(v, mb):
                    continue
                for sp in self.seq_par:
                    stand_in = _shape(
                        self.num_gpus, self.dp_size, self.tp_size, self.pp_size, 0, mb, base, False, v, sp, self.cp_size,
                        self.ep_size, Offload.NONE, 0, self.expert_tp_size, NvmeOffload.NONE,
                    )
                    floor = min(floor, step_lower_bound_s(run, stand_in))
        return floor


def shape_groups(run: SearchRun, num_gpus: int):
    """The groups of shapes the request admits for ``num_gpus``, in enumeration order, each past
    the rules no micro-batch, ZeRO stage or interleaving can repair (their shapes are legal or
    not: the caller checks)."""
    request = run.request
    model, training, constraints = request.model, request.training, request.constraints
    admits = constraints.admits
    recompute = _recompute_options(request)
    tp_cp = [(t, c) for t in divisors(num_gpus) for c in cp_sizes(request, num_gpus // t)]
    for tp, cp in tp_cp:
        if not admits("tp_size", tp):
            continue
        # Expert groups (ep x etp ranks) are carved from a stage's tp x dp x cp ranks: at etp = tp
        # ep divides dp x cp, at etp 1 it may take the dense TP ranks too.
        expert_groups = (
            (p, e, etp)
            for p in divisors(num_gpus // (tp * cp))
            for etp in expert_tp_sizes(request, tp, num_gpus // p)
            for e in ep_sizes(request, num_gpus // ((etp or tp) * p))
        )
        for pp, ep, etp in expert_groups:
            dp = num_gpus // (tp * cp * pp)
            if not (admits("pp_size", pp) and admits("dp_size", dp)):
                continue
            coarse = Shape(num_gpus, dp, tp, pp, 0, 1, Recompute.NONE, False, 1, False, cp, ep, expert_tp_size=etp)
            if not is_legal(run, coarse, coarse=True):
                continue  # tp / pp / cp / ep / etp / batch rules that no micro-batch, ZeRO stage or v can repair
            if training.global_batch_size % dp:
                run.reject(Rule.BATCH_DIVISIBLE)
                continue
            per_replica = training.global_batch_size // dp
            micro_batches = [b for b in divisors(per_replica) if b <= MICRO_BATCH_CHOICES_MAX and admits("micro_batch_size", b)]
            admitted_zero = zero_stages = [z for z in range(4) if admits("zero_stage", z)]
            if dp == 1 and len(zero_stages) > 1:
                zero_stages = zero_stages[:1]  # nothing to shard over: every stage is the same plan
            virtual = []
            for v in range(1, model.num_layers // pp + 1):
                if not admits("virtual_stages", v):
                    continue
                if v > 1 and pp == 1:
                    run.reject(Rule.INTERLEAVE_NEEDS_PP)
                elif v > 1 and model.num_layers % (pp * v):
                    run.reject(Rule.INTERLEAVE_LAYERS_DIVISIBLE)
                else:
                    virtual.append(v)
            seq_par = [s for s in (False, True) if admits("sequence_parallel", s) and (tp > 1 or not s)]
            offloads = [
                (offload, nvme, offload_zero_stages(offload, zero_stages, admitted_zero, dp, cp, nvme))
                for offload in offload_options(run, pp) for nvme in nvme_options(run, offload)
            ]
            yield ShapeGroup(num_gpus, dp, tp, pp, cp, ep, etp, per_replica, micro_batches, recompute, virtual, seq_par, offloads)


def shapes(run: SearchRun, num_gpus: int):
    """Every shape the request admits for ``num_gpus``, legal or not (the caller checks)."""
    for group in shape_groups(run, num_gpus):
        for offload_index in range(len(group.offloads)):
            for mb in group.micro_batches:
                yield from group.members(run, offload_index, mb)


def searches_activation_offload(run: SearchRun) -> bool:
    """Whether the search may offload activations of its own accord (``solver.search.loop``'s
    ``_activation_offload_plan``): where the request leaves ``activation_offload_layers`` open
    (a request that names values plans with those, ``activation_offload_options``), admits
    running without recomputation, the cluster gives the host facts to cost the copies, and the
    request's framework runs it (Megatron-core; 'any' through it)."""
    if run.activation_offload is None:
        request = run.request
        probe = ParallelConfig(activation_offload_layers=1)
        run.activation_offload = (
            "activation_offload_layers" not in request.constraints.allowed
            and request.constraints.admits("recompute", Recompute.NONE.value)
            and request.cluster.has_host_facts
            and request.model.num_layers > 1
            and not framework_violations(probe, request.constraints.framework)
        )
    return run.activation_offload


def activation_offload_options(run: SearchRun, pp: int, base: Recompute) -> list[int]:
    """Layer counts whose activations a shape may offload (``ParallelConfig.activation_offload_layers``):
    0 unless the request names values for it (then those it admits below the model's layer
    count), and only on one stage without recomputation, as Megatron-core runs it
    (``solver.spec.legality._check_activation_offload``)."""
    options, turned_down = _activation_offload_layers(run.request, pp, base)
    if turned_down:
        run.reject(Rule.ACTIVATION_OFFLOAD_LAYERS)
    return options


def _activation_offload_layers(request: SearchRequest, pp: int, base: Recompute) -> tuple[list[int], bool]:
    """``activation_offload_options`` without counting: the options, and whether any admitted
    count was turned down."""
    if "activation_offload_layers" not in request.constraints.allowed:
        return [0], False
    admitted = [n for n in range(request.model.num_layers) if request.constraints.admits("activation_offload_layers", n)]
    options = [n for n in admitted if n == 0 or (pp == 1 and base is Recompute.NONE)]
    return options, len(options) < len(admitted)


def offload_zero_stages(
    offload: Offload, zero_stages: list[int], admitted: list[int], dp: int, cp: int, nvme: NvmeOffload = NvmeOffload.NONE
) -> list[int]:
    """ZeRO stages to pair with ``offload`` (and ``nvme``): without offload the shape's
    (``zero_stages``), else those offload runs with (``offload_zero_stage``). At one data-parallel
    replica, where the stages are otherwise one plan, offload's are two: gradients kept on the GPU
    (ZeRO-0/1) or streamed to the host (ZeRO-2/3; ``solver.cost.offload.streams_gradients``)."""
    if offload is Offload.NONE:
        return zero_stages
    needed = int(offload_zero_stage(offload, dp * cp, nvme))
    if dp > 1:
        return [z for z in zero_stages if z >= needed]
    kept = [z for z in admitted if needed <= z < int(ZeroStage.OS_G)][:1]
    streamed = [z for z in admitted if z >= max(needed, int(ZeroStage.OS_G))][:1]
    return kept + streamed


def offload_options(run: SearchRun, pp: int) -> list[Offload]:
    """The offload modes a shape of ``pp`` stages may take: the run's, less those the cluster
    cannot cost (no host facts) or that need one stage (``solver.spec.legality._check_offload``)."""
    options = [Offload.NONE] if Offload.NONE in run.offload_modes else []
    for mode in run.offload_modes:
        if mode is Offload.NONE:
            continue
        if not run.request.cluster.has_host_facts:
            run.reject(Rule.OFFLOAD_NEEDS_HOST)
        elif run.request.training.optimizer is OptimizerKind.MUON:
            run.reject(Rule.OFFLOAD_OPTIMIZER_KIND)
        elif pp > 1:
            run.reject(Rule.OFFLOAD_WITH_PP)
        else:
            options.append(mode)
    return options


def nvme_options(run: SearchRun, offload: Offload) -> list[NvmeOffload]:
    """What of ``offload``'s states a shape may keep on NVMe: the run's NVMe modes that hold only
    what ``offload`` takes off the GPU (``nvme_fits_offload``: other pairs are not in the space),
    less those the cluster cannot cost (no NVMe facts)."""
    options = []
    for mode in run.nvme_modes:
        if not nvme_fits_offload(offload, mode):
            continue
        if mode is not NvmeOffload.NONE and not run.request.cluster.has_nvme_facts:
            run.reject(Rule.OFFLOAD_NEEDS_NVME)
            continue
        options.append(mode)
    return options



def is_legal(run: SearchRun, shape: Shape, coarse: bool = False) -> bool:
    """Whether the shape passes the legality rules. ``coarse``: the structural rules
    (``check_structure``) and placement of (tp, pp, dp) with micro-batch 1 and no interleaving,
    counted once for the whole group. Otherwise the framework rules of (pp, ZeRO stage, cp): the
    generator already keeps micro-batches, interleaving and layer counts legal, and everything
    returned passes ``check_structure`` again in the evaluator and the validator."""
    request = run.request
    constraints = request.constraints
    if coarse:
        parallel = shape.uniform()
        problems: list[Rule] = []
        try:
            check_structure(request.model, request.cluster, request.training, parallel, shape.num_gpus)
        except SpecError as error:
            problems.append(error.rule or Rule.CONSTRAINTS)
        problems += [v.rule for v in placement_violations(request.cluster, parallel, constraints.allow_tp_across_nodes)]
        for problem in problems:
            run.reject(problem)
        if problems:
            run.stats.configurations_enumerated += 1
            run.stats.configurations_illegal += 1
        return not problems
    # The expert TP size is read against tp (torchtitan runs etp 1 or tp, and etp 1 only with ep a
    # multiple of tp x cp): keyed by both where it differs from tp, else as before.
    expert_tp = (shape.tp_size, shape.expert_tp_size) if shape.expert_tp_size else ()
    key = (shape.pp_size, shape.zero_stage, shape.cp_size, shape.ep_size, shape.activation_offload_layers > 0, *expert_tp)
    if key not in run.framework_rules:
        probe = ParallelConfig(
            tp_size=shape.tp_size if expert_tp else 1,
            pp_size=shape.pp_size, zero_stage=ZeroStage(shape.zero_stage), cp_size=shape.cp_size, ep_size=shape.ep_size,
            activation_offload_layers=min(shape.activation_offload_layers, 1),
            expert_tp_size=shape.expert_tp_size or None,
        )
        run.framework_rules[key] = framework_violations(probe, constraints.framework)
    for violation in run.framework_rules[key]:
        run.reject(violation.rule)
    return not run.framework_rules[key]


class Profiles:
    """Per-search caches of profiles and what is derived from them, keyed by profile shape
    (hashing a whole profile costs more than what it would save)."""

    def __init__(self, request: SearchRequest) -> None:
        self.request = request
        # A profile reads the GPU, the NVLink domain and the links, never the cluster's size:
        # costed on a one-node copy, the analytic profiles' cache serves every size of this
        # cluster (a sweep's GPU counts; tests/test_sweep_speed.py checks the profiles agree).
        self._cluster = replace(request.cluster, num_nodes=1)
        self._profiles: dict[ProfileShape, LayerChain] = {}
        self._model_time: dict[tuple[ProfileShape, Recompute], float] = {}
        self._rows: dict[tuple[ProfileShape, Recompute], tuple] = {}
        self._selective_noop: dict[ProfileShape, bool] = {}
        self._message: dict[ProfileShape, int] = {}
        self._parameters: dict[tuple[int, int, int], tuple[int, int]] = {}
        self._pipeline_comm: dict[tuple, float] = {}

    def for_request(self, request: SearchRequest) -> "Profiles":
        """Caches for ``request``: where it has this one's model, training, measured profile and
        cluster type (any size), sharing the profiles and what derives from them (not the
        pipeline's p2p times, which read the cluster's size); else fresh ones."""
        r = self.request
        same = (request.model, request.training, request.profile) == (r.model, r.training, r.profile)
        if not same or replace(request.cluster, num_nodes=1) != self._cluster:
            return Profiles(request)
        shared = copy.copy(self)  # the same dicts
        shared.request, shared._pipeline_comm = request, {}
        return shared

    def profile(self, shape: ProfileShape) -> LayerChain:
        """The layers the search plans ``shape`` with: the analytic model's chain
        (``AnalyticLayers``: the evaluator's profile without a named copy per layer), or the
        request's measured profile carried to ``shape`` (``resolve_profile``)."""
        if shape not in self._profiles:
            r = self.request
            if r.profile is None:
                self._profiles[shape] = analytic_layers(r.model, self._cluster, r.training, shape)
            else:
                self._profiles[shape] = resolve_profile(r.model, self._cluster, r.training, shape, r.profile)
        return self._profiles[shape]

    def model_time_s(self, shape: ProfileShape, base: Recompute) -> float:
        """One micro-batch's forward + backward + TP time through every layer, each running
        ``base`` (NONE or SELECTIVE: no full recompute), summed in chain order."""
        key = (shape, base)
        if key not in self._model_time:
            self._model_time[key] = sum(_each(self.profile(shape).layers, lambda layer: layer.time_s(base)))
        return self._model_time[key]

    def selective_changes_nothing(self, shape: ProfileShape) -> bool:
        """With fused attention there is no score tensor to drop: selective recompute is a no-op
        (it keeps what no recomputation keeps, and takes as long)."""
        if shape not in self._selective_noop:
            layers = _distinct(self.profile(shape).layers)
            self._selective_noop[shape] = all(layer.selective_activation_bytes == layer.activation_bytes for layer in layers) and (
                # No layer's selective recompute takes any time (LayerProfile.recompute_s): each
                # layer's time_s is the same in both modes, and so is the model's, without summing
                # it for shapes whose selective bound is then never asked for.
                all(layer.selective_recompute_s == 0 for layer in layers)
                or self.model_time_s(shape, Recompute.SELECTIVE) == self.model_time_s(shape, Recompute.NONE)
            )
        return self._selective_noop[shape]

    def parameter_count(self, tp: int, ep: int = 1, etp: int = 0) -> tuple[int, int]:
        """Parameters of one tensor- (and expert-) parallel rank's share of the whole model, and
        how many of them are routed experts' (each expert split over ``etp`` ranks; 0: tp)."""
        if (tp, ep, etp) not in self._parameters:
            layers = self.profile(ProfileShape(tp, 1, False, 1, ep, etp or None)).layers
            self._parameters[tp, ep, etp] = (
                sum(layer.parameter_count for layer in layers), sum(layer.expert_parameter_count for layer in layers)
            )
        return self._parameters[tp, ep, etp]

    def message_bytes(self, shape: ProfileShape) -> int:
        """The pipeline's point-to-point message: one transformer layer's output."""
        if shape not in self._message:
            blocks = self.profile(shape).transformer_layers
            self._message[shape] = blocks[0].output_bytes if blocks else 0
        return self._message[shape]

    def pipeline_comm_s(self, shape: "Shape", num_micro_batches: int) -> float:
        """``schedule.pipeline_comm_s`` of the shape's uniform configuration, which depends on its
        dp, tp, pp, cp, interleaving, micro-batch count and message, not on its ZeRO stage,
        recomputation or expert parallelism (shared by the shapes that differ only in those, or
        in a micro-batch size and SP that send the same message)."""
        message = self.message_bytes(shape.profile_shape)
        key = (shape.dp_size, shape.tp_size, shape.pp_size, shape.cp_size, shape.virtual_stages, num_micro_batches, message)
        if key not in self._pipeline_comm:
            self._pipeline_comm[key] = pipeline_comm_s(self.request.cluster, shape.uniform(), num_micro_batches, message)
        return self._pipeline_comm[key]

    def rows(self, shape: ProfileShape, base: Recompute) -> tuple:
        key = (shape, base)
        if key not in self._rows:
            self._rows[key] = layer_rows(self.profile(shape), base)
        return self._rows[key]


def _distinct(layers: tuple[LayerProfile, ...]) -> list[LayerProfile]:
    """Each layer object of ``layers`` once, in order (an analytic chain repeats its one or two
    kinds of transformer layer)."""
    return list({id(layer): layer for layer in layers}.values())


def _each(layers: tuple[LayerProfile, ...], value: Callable[[LayerProfile], float]) -> list[float]:
    """``value(layer)`` for each of ``layers`` in order, worked out once per layer object."""
    ids = list(map(id, layers))
    known = {key: value(layer) for key, layer in dict(zip(ids, layers)).items()}
    return list(map(known.__getitem__, ids))


def dominated_selective(run: SearchRun, shape: Shape) -> bool:
    """A selective-base shape whose plans its base-none twin gives too (selective recompute is a
    no-op for its profile). Once per (tp, micro-batch, SP, cp, ep, etp, full recompute)."""
    key = (
        shape.tp_size, shape.micro_batch_size, shape.sequence_parallel, shape.cp_size, shape.ep_size, shape.expert_tp_size,
        shape.full_recompute,
    )
    if key not in run.selective_dominated:
        none_admitted = run.request.constraints.admits("recompute", Recompute.NONE.value)
        noop = run.profiles.selective_changes_nothing(shape.profile_shape)
        run.selective_dominated[key] = noop and (none_admitted or shape.full_recompute)
    return run.selective_dominated[key]


def step_lower_bound_s(run: SearchRun, shape: Shape) -> float:
    """No configuration of this shape steps faster: every stage's time is at least the model's
    forward + backward + TP time (no full recompute) over pp, the 1F1B schedule runs
    m + (p - 1)/v of the slowest stage, and the pipeline's p2p sends are on the critical path.
    Shared by the shapes that differ only in ZeRO stage, full recompute or offload, which it
    does not read."""
    key = (
        shape.tp_size, shape.micro_batch_size, shape.sequence_parallel, shape.cp_size, shape.ep_size, shape.expert_tp_size,
        shape.base_recompute, shape.pp_size, shape.dp_size, shape.virtual_stages,
    )
    if key not in run.step_bounds:
        request = run.request
        per_micro_batch = run.profiles.model_time_s(shape.profile_shape, shape.base_recompute) / shape.pp_size
        m = micro_batch_count(request.training.global_batch_size, shape.dp_size, shape.micro_batch_size)
        comm = 0.0
        if shape.pp_size > 1:
            comm = run.profiles.pipeline_comm_s(shape, m)
        run.step_bounds[key] = pipeline_slots(shape.pp_size, shape.virtual_stages, m) * per_micro_batch + comm
    return run.step_bounds[key]


def count_step_lower_bound_s(run: SearchRun, num_gpus: int) -> float:
    """No plan on ``num_gpus`` GPUs steps faster. A shape's step takes at least its m
    micro-batches through its slowest stage, which holds at least 1/pp of the model:
    m * model_time / pp = B * tp * model_time(tp, mb, sp) / (mb * N). The minimum over every tp
    that fits the model and the NVLink domain, every micro-batch size and SP bounds all shapes; with
    context parallelism a GPU runs 1/cp of each sample, m * model_time(tp, mb, sp, cp) / pp =
    B * tp * cp * model_time / (mb * N), minimised over the cp sizes too, and over the ep and
    expert TP sizes of an MoE model (they change the all-to-alls and the experts' GEMM shapes)."""
    request = run.request
    training, model = request.training, request.model
    best_s = float("inf")
    for tp in divisors(num_gpus):
        if not tp_splits_model(model, training, tp):
            continue
        if request.cluster.domain_gpus % tp and not request.constraints.allow_tp_across_nodes:
            continue
        if not request.constraints.admits("tp_size", tp):
            continue
        for mb in divisors(training.global_batch_size):
            if mb > MICRO_BATCH_CHOICES_MAX or not request.constraints.admits("micro_batch_size", mb):
                continue
            for sp, cp in itertools.product((False, True) if tp > 1 else (False,), cp_sizes(request, num_gpus // tp)):
                for etp in expert_tp_sizes(request, tp, num_gpus):
                    # At etp = tp as before; otherwise every ep an expert group of etp-wide experts may take.
                    for ep in ep_sizes(request, num_gpus // etp if etp else num_gpus // (tp * cp)):
                        shape = ProfileShape(tp, mb, sp, cp, ep, etp or None)
                        per_sample = run.profiles.model_time_s(shape, Recompute.NONE) * tp * cp / mb
                        best_s = min(best_s, training.global_batch_size * per_sample / num_gpus)
    return best_s
