"""The optimizer: enumerate legal parallel configurations, plan each one's partition, rank by the
objective and return the top k, each re-evaluated by ``solver.evaluate`` and checked by
``solver.validate``.

Order of work (best-first branch and bound):
1. ``_shapes`` enumerates (num_gpus, dp, tp, pp, ZeRO, micro-batch, recompute, v, SP) that the
   request admits; ``check_structure`` and the framework / placement rules name what is illegal.
2. Each legal shape gets a lower bound on its step time from the per-layer profile: the whole
   model's compute split perfectly over the pp stages, through the 1F1B schedule, plus the
   pipeline's point-to-point time (``_step_lower_bound_s``). Shapes are visited in bound order.
3. Once k plans are held, a shape whose bound cannot beat the k-th is pruned, and so is every
   later one (the bounds are sorted): what is returned is optimal under the model.
4. A visited shape's partition (layers per stage, recomputed layers per stage) comes from
   ``solver.partition``; its exact bottleneck gives a tighter bound before the evaluator runs.
"""

from __future__ import annotations

import bisect
import itertools
import time
from dataclasses import dataclass, field, replace

from solver.errors import SpecError
from solver.evaluate import evaluate, resolve_profile
from solver.execution import ParallelConfig, Recompute, ZeroStage
from solver.legality import check_structure, framework_violations, placement_violations, uniform_partition
from solver.partition import PartitionSolution, fixed_partition, layer_rows, partition_problem, solve
from solver.profile import ModelProfile
from solver.result import Evaluation
from solver.schedule import pipeline_comm_s
from solver.search_types import Candidate, Objective, SearchRequest, SearchResult, SearchStats
from solver.validate import validate

SECONDS_PER_HOUR = 3600.0
MICRO_BATCH_CHOICES_MAX = 256  # micro-batches larger than this never pay off and blow up memory


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

    def uniform(self) -> ParallelConfig:
        """The configuration with a uniform partition and every layer on the base recompute."""
        return ParallelConfig(
            self.dp_size, self.tp_size, self.pp_size, ZeroStage(self.zero_stage), self.micro_batch_size,
            self.base_recompute, self.virtual_stages, self.sequence_parallel,
        )


@dataclass
class _Run:
    """What one search accumulates: the request, the stats and the reasons shapes failed."""

    request: SearchRequest
    stats: SearchStats
    deadline: float
    rejected: dict[str, int] = field(default_factory=dict)  # rule -> shapes rejected by it
    legal: list[Shape] = field(default_factory=list)  # shapes that passed every rule
    closest: list[tuple[float, ParallelConfig, Evaluation]] = field(default_factory=list)  # memory misses
    partitions_exact: bool = True
    framework_rules: dict[tuple[int, int], list[str]] = field(default_factory=dict)  # (pp, zero) -> violations
    profiles: "_Profiles" = field(init=False)  # per-search profile caches

    def __post_init__(self) -> None:
        self.profiles = _Profiles(self.request)

    def reject(self, rule: str) -> None:
        self.rejected[rule] = self.rejected.get(rule, 0) + 1


# --------------------------------------------------------------------------- request checks


def _price(request: SearchRequest) -> float | None:
    if request.gpu_hour_price_usd is not None:
        return request.gpu_hour_price_usd
    return request.cluster.gpu_hour_price_usd


def check_request(request: SearchRequest) -> None:
    """Raise SpecError for a request the search cannot answer."""
    objective = Objective(request.objective)
    if not isinstance(request.top_k, int) or request.top_k < 1:
        raise SpecError("top_k", f"must be a positive integer, got {request.top_k!r}")
    if request.num_gpus is not None:
        if request.num_gpus < 1:
            raise SpecError("num_gpus", f"must be positive, got {request.num_gpus}")
        if request.num_gpus > request.cluster.num_gpus:
            raise SpecError("num_gpus", f"{request.num_gpus} GPUs requested, the cluster has {request.cluster.num_gpus}")
    if objective is Objective.MIN_TIME_TO_TRAIN and not request.training.train_tokens:
        raise SpecError("training.train_tokens", "min_time_to_train needs a token budget (train_tokens)")
    if objective is Objective.MIN_COST:
        price = _price(request)
        if price is None:
            raise SpecError("gpu_hour_price_usd", "min_cost needs a GPU-hour price: give gpu_hour_price_usd or a cluster with a price")
        if price <= 0:
            raise SpecError("gpu_hour_price_usd", f"must be positive, got {price}")
    if objective is Objective.MIN_GPUS:
        if not request.training.train_tokens:
            raise SpecError("training.train_tokens", "min_gpus needs a token budget (train_tokens) to compare against deadline_s")
        if request.deadline_s is None or request.deadline_s <= 0:
            raise SpecError("deadline_s", "min_gpus needs a positive deadline_s (seconds of training)")
    if request.time_budget_s <= 0:
        raise SpecError("time_budget_s", "must be positive")


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


# --------------------------------------------------------------------------- enumeration


def _divisors(n: int) -> list[int]:
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


def _shapes(run: _Run, num_gpus: int):
    """Every shape the request admits for ``num_gpus``, legal or not (the caller checks)."""
    request = run.request
    model, training, constraints = request.model, request.training, request.constraints
    admits = constraints.admits
    for tp in _divisors(num_gpus):
        if not admits("tp_size", tp):
            continue
        for pp in _divisors(num_gpus // tp):
            dp = num_gpus // (tp * pp)
            if not (admits("pp_size", pp) and admits("dp_size", dp)):
                continue
            if not _legal(run, Shape(num_gpus, dp, tp, pp, 0, 1, Recompute.NONE, False, 1, False), coarse=True):
                continue  # tp / pp / batch rules that no micro-batch, ZeRO stage or v can repair
            if training.global_batch_size % dp:
                run.reject("[batch_divisible]")
                continue
            per_replica = training.global_batch_size // dp
            micro_batches = [b for b in _divisors(per_replica) if b <= MICRO_BATCH_CHOICES_MAX and admits("micro_batch_size", b)]
            zero_stages = [z for z in range(4) if admits("zero_stage", z)]
            if dp == 1 and len(zero_stages) > 1:
                zero_stages = zero_stages[:1]  # nothing to shard over: every stage is the same plan
            virtual = [v for v in range(1, model.num_layers // pp + 1)
                       if admits("virtual_stages", v) and (v == 1 or (pp > 1 and model.num_layers % (pp * v) == 0))]
            seq_par = [s for s in (False, True) if admits("sequence_parallel", s) and (tp > 1 or not s)]
            for mb, zero, (base, full), v, sp in itertools.product(
                micro_batches, zero_stages, _recompute_options(request), virtual, seq_par
            ):
                if v > 1 and (per_replica // mb) % pp:
                    run.reject("[interleave_micro_batches]")
                    continue
                yield Shape(num_gpus, dp, tp, pp, zero, mb, base, full, v, sp)


def _rule(message: str) -> str:
    return message.split("]")[0] + "]" if message.startswith("[") else message


def _legal(run: _Run, shape: Shape, coarse: bool = False) -> bool:
    """Whether the shape passes the legality rules. ``coarse``: the structural rules
    (``check_structure``) and placement of (tp, pp, dp) with micro-batch 1 and no interleaving,
    counted once for the whole group. Otherwise the framework rules of (pp, ZeRO stage): the
    generator already keeps micro-batches, interleaving and layer counts legal, and everything
    returned passes ``check_structure`` again in the evaluator and the validator."""
    request = run.request
    constraints = request.constraints
    if coarse:
        parallel = shape.uniform()
        problems = []
        try:
            check_structure(request.model, request.cluster, request.training, parallel, shape.num_gpus)
        except SpecError as error:
            problems.append(_rule(error.reason) if error.reason.startswith("[") else error.field)
        problems += placement_violations(request.cluster, parallel, constraints.allow_tp_across_nodes)
        for problem in problems:
            run.reject(_rule(problem))
        if problems:
            run.stats.configurations_enumerated += 1
            run.stats.configurations_illegal += 1
        return not problems
    key = (shape.pp_size, shape.zero_stage)
    if key not in run.framework_rules:
        probe = ParallelConfig(pp_size=shape.pp_size, zero_stage=ZeroStage(shape.zero_stage))
        run.framework_rules[key] = framework_violations(probe, constraints.framework)
    for problem in run.framework_rules[key]:
        run.reject(_rule(problem))
    return not run.framework_rules[key]


class _Profiles:
    """Per-search caches of profiles and what is derived from them, keyed by small tuples
    (hashing a whole profile costs more than what it would save)."""

    def __init__(self, request: SearchRequest) -> None:
        self.request = request
        self._profiles: dict[tuple, ModelProfile] = {}
        self._model_time: dict[tuple, float] = {}
        self._rows: dict[tuple, tuple] = {}

    def profile(self, tp: int, mb: int, sp: bool) -> ModelProfile:
        key = (tp, mb, sp)
        if key not in self._profiles:
            r = self.request
            parallel = ParallelConfig(tp_size=tp, micro_batch_size=mb, sequence_parallel=sp)
            self._profiles[key] = resolve_profile(r.model, r.cluster, r.training, parallel, r.profile)
        return self._profiles[key]

    def model_time_s(self, tp: int, mb: int, sp: bool, selective: bool) -> float:
        """One micro-batch's forward + backward + TP time through every layer (no full recompute)."""
        key = (tp, mb, sp, selective)
        if key not in self._model_time:
            self._model_time[key] = sum(layer.time_s(False, selective) for layer in self.profile(tp, mb, sp).layers)
        return self._model_time[key]

    def selective_changes_nothing(self, tp: int, mb: int, sp: bool) -> bool:
        """With fused attention there is no score tensor to drop: selective recompute is a no-op."""
        return self.model_time_s(tp, mb, sp, True) == self.model_time_s(tp, mb, sp, False) and all(
            layer.selective_activation_bytes == layer.activation_bytes for layer in self.profile(tp, mb, sp).layers
        )

    def rows(self, tp: int, mb: int, sp: bool, selective: bool) -> tuple:
        key = (tp, mb, sp, selective)
        if key not in self._rows:
            self._rows[key] = layer_rows(self.profile(tp, mb, sp), selective)
        return self._rows[key]


def _dominated_selective(run: _Run, shape: Shape) -> bool:
    none_admitted = run.request.constraints.admits("recompute", Recompute.NONE.value)
    noop = run.profiles.selective_changes_nothing(shape.tp_size, shape.micro_batch_size, shape.sequence_parallel)
    return noop and (none_admitted or shape.full_recompute)


def _step_lower_bound_s(run: _Run, shape: Shape) -> float:
    """No configuration of this shape steps faster: every stage's time is at least the model's
    forward + backward + TP time (no full recompute) over pp, the 1F1B schedule runs
    m + (p - 1)/v of the slowest stage, and the pipeline's p2p sends are on the critical path."""
    request = run.request
    selective = shape.base_recompute is Recompute.SELECTIVE
    tp, mb, sp = shape.tp_size, shape.micro_batch_size, shape.sequence_parallel
    per_micro_batch = run.profiles.model_time_s(tp, mb, sp, selective) / shape.pp_size
    m = request.training.global_batch_size // (shape.dp_size * mb)
    comm = 0.0
    if shape.pp_size > 1:
        blocks = run.profiles.profile(tp, mb, sp).transformer_layers
        comm = pipeline_comm_s(request.cluster, shape.uniform(), m, blocks[0].output_bytes if blocks else 0)
    return (m + (shape.pp_size - 1) / shape.virtual_stages) * per_micro_batch + comm


def _objective_value(request: SearchRequest, step_time_s: float, num_gpus: int) -> float:
    """Lower is better: s/token, s, USD (USD/token without a token budget), or GPUs."""
    training = request.training
    per_token = step_time_s / training.tokens_per_step
    objective = Objective(request.objective)
    if objective is Objective.MAX_THROUGHPUT:
        return per_token
    if objective is Objective.MIN_TIME_TO_TRAIN:
        return per_token * training.train_tokens
    if objective is Objective.MIN_COST:
        usd_per_s = num_gpus * _price(request) / SECONDS_PER_HOUR
        return usd_per_s * per_token * (training.train_tokens or 1.0)
    return float(num_gpus)


def _usable_bytes(request: SearchRequest) -> float:
    return request.cluster.gpu.memory_bytes * request.constraints.max_memory_fraction


def _plan(run: _Run, shape: Shape, optimise_partition: bool = True) -> list[ParallelConfig]:
    """Configurations to evaluate for this shape: the optimal partition (with per-stage
    recompute) and the uniform one, when they fit under the partition model."""
    request = run.request
    training = request.training
    tp, mb, sp = shape.tp_size, shape.micro_batch_size, shape.sequence_parallel
    prof = run.profiles.profile(tp, mb, sp)
    rows = run.profiles.rows(tp, mb, sp, shape.base_recompute is Recompute.SELECTIVE)
    uniform = shape.uniform()
    m = training.global_batch_size // (shape.dp_size * mb)
    problem = partition_problem(prof, uniform, training, m, _usable_bytes(request), shape.full_recompute, request.cluster.gpu, rows)
    solutions: list[PartitionSolution] = []
    even = uniform_partition(request.model.num_layers, uniform.num_chunks)
    fixed = fixed_partition(problem, even)
    if fixed is not None:
        solutions.append(fixed)
    if optimise_partition and shape.virtual_stages == 1 and shape.pp_size > 1:
        best = solve(problem, time_limit_s=max(0.5, run.deadline - time.perf_counter()))
        if best is not None:
            if best.method == "cpsat":
                run.stats.cpsat_calls += 1
                run.stats.cpsat_status[best.status] = run.stats.cpsat_status.get(best.status, 0) + 1
                run.partitions_exact &= best.status == "OPTIMAL"
            if fixed is None or best.stage_layers != fixed.stage_layers:
                solutions.append(best)
    return [_to_parallel(shape, s, even) for s in solutions]


def _to_parallel(shape: Shape, solution: PartitionSolution, even: tuple[int, ...]) -> ParallelConfig:
    layers = None if solution.stage_layers == even else solution.stage_layers
    recomputed = solution.recompute_layers
    if not any(recomputed) and (not shape.full_recompute or shape.base_recompute is Recompute.SELECTIVE):
        return replace(shape.uniform(), stage_layers=layers)
    if shape.base_recompute is Recompute.NONE and all(k == n for k, n in zip(recomputed, solution.stage_layers)):
        return replace(shape.uniform(), recompute=Recompute.FULL, stage_layers=layers)
    # Partial full recompute: labelled FULL over a base of none (the evaluator's convention),
    # SELECTIVE when the other layers recompute selectively.
    label = Recompute.SELECTIVE if shape.base_recompute is Recompute.SELECTIVE else Recompute.FULL
    if not any(recomputed) and label is Recompute.FULL and shape.base_recompute is Recompute.NONE:
        # no layer recomputed: this is the plain plan when 'none' is admitted
        return replace(shape.uniform(), stage_layers=layers)
    return replace(shape.uniform(), recompute=label, stage_layers=layers, full_recompute_layers=recomputed)


def _evaluate(request: SearchRequest, parallel: ParallelConfig, num_gpus: int) -> Evaluation:
    c = request.constraints
    return evaluate(
        request.model, request.cluster, request.training, parallel, num_gpus, request.profile,
        c.framework, c.allow_tp_across_nodes, c.max_memory_fraction,
    )


# --------------------------------------------------------------------------- the search loop


@dataclass(frozen=True)
class _Held:
    """A feasible plan found by the search."""

    key: tuple  # rank key: objective value, step time, GPUs, then the configuration (determinism)
    parallel: ParallelConfig
    evaluation: Evaluation
    num_gpus: int
    value: float


def _rank_key(value: float, evaluation: Evaluation, parallel: ParallelConfig, num_gpus: int) -> tuple:
    from solver.search_types import parallel_to_dict

    return (value, evaluation.prediction.step_time_s, num_gpus, repr(sorted(parallel_to_dict(parallel).items())))


def search_counts(
    run: _Run, request: SearchRequest, counts: list[int], top_k: int, accept=None, ceiling: float = float("inf")
) -> list[_Held]:
    """Best-first over the shapes of every count in ``counts``; the top ``top_k`` plans, ranked
    by ``request``'s objective. ``accept(evaluation)`` may turn down a feasible plan (min_gpus:
    the deadline); shapes whose bound exceeds ``ceiling`` cannot be accepted and are pruned."""
    stats = run.stats
    bounded: list[tuple[float, Shape]] = []
    for num_gpus in counts:
        for shape in _shapes(run, num_gpus):
            stats.configurations_enumerated += 1
            if not _legal(run, shape):
                stats.configurations_illegal += 1
                continue
            if shape.base_recompute is Recompute.SELECTIVE and _dominated_selective(run, shape):
                stats.configurations_pruned += 1  # the same plan as its base-none twin
                continue
            run.legal.append(shape)
            step_lb = _step_lower_bound_s(run, shape)
            bounded.append((_objective_value(request, step_lb, num_gpus), shape))
    bounded.sort(key=lambda item: (item[0], item[1]))

    held: list[_Held] = []  # ascending by key, at most top_k
    seen: set[ParallelConfig] = set()
    for index, (bound, shape) in enumerate(bounded):
        if bound > ceiling or (len(held) >= top_k and bound >= held[-1].key[0]):
            stats.configurations_pruned += len(bounded) - index
            break
        if time.perf_counter() > run.deadline:
            stats.timed_out = True
            stats.configurations_pruned += len(bounded) - index
            break
        plans = _plan(run, shape)
        if not plans:
            run.reject("[memory]")  # no partition fits, even recomputing every layer it may
        for parallel in plans:
            if parallel in seen:
                continue
            seen.add(parallel)
            stats.configurations_evaluated += 1
            evaluation = _evaluate(request, parallel, shape.num_gpus)
            if not evaluation.feasible:
                if any(v.startswith("[memory]") for v in evaluation.violations):
                    run.reject("[memory]")
                    run.closest.append((evaluation.peak_bytes, parallel, evaluation))
                continue
            if accept is not None and not accept(evaluation):
                run.reject("[deadline]")
                continue
            value = _objective_value(request, evaluation.prediction.step_time_s, shape.num_gpus)
            item = _Held(_rank_key(value, evaluation, parallel, shape.num_gpus), parallel, evaluation, shape.num_gpus, value)
            if len(held) < top_k or item.key < held[-1].key:
                bisect.insort(held, item, key=lambda h: h.key)
                del held[top_k:]
    return held


def _time_to_train_bound_s(run: _Run, num_gpus: int) -> float:
    """No plan on ``num_gpus`` GPUs trains faster. A shape's step takes at least its m
    micro-batches through its slowest stage, which holds at least 1/pp of the model:
    m * model_time / pp = B * tp * model_time(tp, mb, sp) / (mb * N). The minimum over every tp
    that fits the model and the node, every micro-batch size and SP bounds all shapes."""
    request = run.request
    training, model = request.training, request.model
    best_s = float("inf")
    for tp in _divisors(num_gpus):
        if model.num_attention_heads % tp or model.num_kv_heads % tp or model.ffn_hidden_size % tp:
            continue
        if request.cluster.gpus_per_node % tp and not request.constraints.allow_tp_across_nodes:
            continue
        if not request.constraints.admits("tp_size", tp):
            continue
        for mb in _divisors(training.global_batch_size):
            if mb > MICRO_BATCH_CHOICES_MAX or not request.constraints.admits("micro_batch_size", mb):
                continue
            for sp in (False, True) if tp > 1 else (False,):
                per_sample = run.profiles.model_time_s(tp, mb, sp, False) * tp / mb
                best_s = min(best_s, training.global_batch_size * per_sample / num_gpus)
    steps = training.train_tokens / training.tokens_per_step
    return steps * best_s


def _search_min_gpus(run: _Run, counts: list[int]) -> list[_Held]:
    """Fewest GPUs whose best plan meets the deadline; ties broken by time to train. Counts are
    tried in increasing order."""
    request = run.request
    fastest = replace(request, objective=Objective.MIN_TIME_TO_TRAIN)
    meets = lambda ev: ev.prediction.time_to_train_s <= request.deadline_s  # noqa: E731
    found: list[_Held] = []
    for num_gpus in counts:
        if len(found) >= request.top_k:
            break
        if _time_to_train_bound_s(run, num_gpus) > request.deadline_s:
            run.stats.configurations_pruned += 1
            run.reject("[deadline]")
            continue
        if time.perf_counter() > run.deadline:
            run.stats.timed_out = True
            break
        plans = search_counts(run, fastest, [num_gpus], request.top_k - len(found), accept=meets, ceiling=request.deadline_s)
        found.extend(replace(h, value=float(h.num_gpus)) for h in plans)
    return found


def find_plans(request: SearchRequest) -> tuple[list[_Held], _Run]:
    """The search without ranking text or explanation: validated plans, best first."""
    started = time.perf_counter()
    check_request(request)
    run = _Run(request, SearchStats(), started + request.time_budget_s)
    counts = gpu_counts(request)
    if not counts:
        raise SpecError("constraints.num_gpus", "no GPU count fits both the constraint and the cluster")
    if Objective(request.objective) is Objective.MIN_GPUS:
        held = _search_min_gpus(run, counts)
    else:
        held = search_counts(run, request, counts, request.top_k)
    accepted = []
    for item in held:
        report = validate(request, item.parallel, item.evaluation, item.num_gpus)
        if report.ok:
            accepted.append(item)
        else:  # never expected: the validator and the search disagree
            run.reject("[validator] " + "; ".join(report.problems))
    run.stats.proven_optimal = not run.stats.timed_out and run.partitions_exact
    run.stats.wall_time_s = time.perf_counter() - started
    return accepted, run


def search(request: SearchRequest) -> SearchResult:
    """The top-k plans for ``request`` (see the module docstring), or an explanation."""
    started = time.perf_counter()
    accepted, run = find_plans(request)
    candidates = tuple(
        Candidate(rank, item.parallel, item.evaluation, item.value, _why(item, accepted[rank] if rank < len(accepted) else None))
        for rank, item in enumerate(accepted, start=1)
    )
    explanation = None
    if not candidates:
        from solver.search_explain import explain

        explanation = explain(run)
    run.stats.wall_time_s = time.perf_counter() - started
    return SearchResult(candidates, run.stats, explanation)


# --------------------------------------------------------------------------- why


def _why(item: _Held, following: _Held | None) -> str:
    p = item.evaluation.prediction
    head = (
        f"tp {item.parallel.tp_size}, pp {item.parallel.pp_size}, dp {item.parallel.dp_size}: "
        f"{p.step_time_s:.3f} s per step, {p.mfu:.1%} MFU"
    )
    if following is None:
        return head + "; the last plan returned"
    q = following.evaluation.prediction
    diffs = {k: q.breakdown_s.get(k, 0.0) - p.breakdown_s.get(k, 0.0) for k in p.breakdown_s}
    if following.num_gpus != item.num_gpus and following.value != item.value:
        return head + f"; uses {item.num_gpus} GPUs against {following.num_gpus} for the next plan"
    key = max(diffs, key=lambda k: diffs[k])
    if diffs[key] <= 0:
        return head + f"; ties with the next plan within {q.step_time_s - p.step_time_s:.3g} s"
    names = {
        "compute_s": "compute", "recompute_s": "recomputation", "tp_comm_s": "tensor-parallel communication",
        "grad_accumulation_s": "gradient accumulation",
        "pp_comm_s": "pipeline communication", "dp_comm_exposed_s": "exposed data-parallel communication",
        "bubble_s": "pipeline bubble", "optimizer_s": "optimizer step",
    }
    return head + (
        f"; beats the next plan mainly on {names.get(key, key)}"
        f" ({p.breakdown_s[key]:.3f} s vs {q.breakdown_s[key]:.3f} s per step)"
    )
