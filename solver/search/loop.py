"""The optimizer: enumerate legal parallel configurations, plan each one's partition, rank by the
objective and return the top k, each re-evaluated by ``solver.cost.evaluate`` and checked by
``solver.search.validate``.

Order of work (best-first branch and bound, in ``solver.search.space`` and here):
1. ``shapes`` enumerates (num_gpus, dp, tp, pp, ZeRO, micro-batch, recompute, v, SP) that the
   request admits; ``check_structure`` and the framework / placement rules name what is illegal.
2. Each legal shape gets a lower bound on its step time from the per-layer profile: the whole
   model's compute split perfectly over the pp stages, through the 1F1B schedule, plus the
   pipeline's point-to-point time (``step_lower_bound_s``). Shapes are visited in bound order.
   The shapes of one (dp, tp, pp, cp, ep, etp) group and micro-batch are built (and checked)
   only when the least of their bounds comes up (``ShapeGroup``, ``_search_count``).
3. Once k plans are held, a shape whose bound cannot beat the k-th is pruned, and so is every
   later one (the bounds are sorted): what is returned is optimal under the model.
4. A visited shape's partition (layers per stage, recomputed layers per stage) comes from
   ``solver.partition``; its exact bottleneck gives a tighter bound before the evaluator runs.
   Before solving, a bound that counts memory (the recomputation each stage needs to hold its
   share of the identical layers, ``tail_bottleneck_lower_bound_ns``) skips shapes whose every
   partition would lose: the bound step 2 takes ignores memory, and an MoE model's expert states
   leave little room for activations.
   A request that names a framework with a launch config (``constraints.framework``) keeps a
   planned configuration only as that framework runs it exactly (``framework_exact``).
5. A range of GPU counts is visited count by count in the order of a per-count bound, and
   stops when no remaining count can beat the k-th plan.

"Optimal under the model" (``SearchStats.proven_optimal``): every bound is a true lower bound
of what the evaluator predicts, the partition of one-chunk-per-stage pipelines is solved
exactly, and interleaved pipelines use uniform chunks (the rule that layers divide by pp x v).
"""

from __future__ import annotations

import bisect
import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from solver.cost.price import gpu_time_cost_usd
from solver.cost.result import Evaluation
from solver.cost.schedule import pipeline_slots
from solver.cost.stage import expert_state_bytes_per_parameter, state_bytes_per_parameter
from solver.frameworks import framework_format, nearest_exact
from solver.partition.fixed import fixed_partition
from solver.partition.problem import (
    INFEASIBLE_NS,
    PartitionMethod,
    PartitionProblem,
    PartitionSolution,
    SolveStatus,
    allocatable_bytes,
    bottleneck_lower_bound_ns,
    partition_problem,
    stage_memory_kib,
    stage_time_lower_bound_s,
)
from solver.partition.solve import solve, uses_cpsat
from solver.partition.tail import tail_bottleneck_lower_bound_ns
from solver.search.explain import explain
from solver.search.request import DEADLINE_S_RANGE, Objective, SearchRequest
from solver.search.result import Candidate, SearchResult, SearchStats
from solver.search.space import (
    Profiles,
    SearchRun,
    Shape,
    ShapeGroup,
    count_step_lower_bound_s,
    dominated_selective,
    gpu_counts,
    is_legal,
    searches_activation_offload,
    shape_groups,
    step_lower_bound_s,
)
from solver.search.validate import recompute_values, validate
from solver.spec.dimensions import NvmeOffload, Offload, config_values
from solver.spec.errors import SpecError, check_in_range
from solver.spec.hardware import GPU_HOUR_PRICE_USD_RANGE
from solver.spec.legality import stage_layer_counts, uniform_partition
from solver.spec.parallel import ParallelConfig, micro_batch_count, parallel_to_dict
from solver.spec.rules import Rule
from solver.spec.training import Recompute

# --------------------------------------------------------------------------- request checks


def _price(request: SearchRequest) -> float | None:
    if request.gpu_hour_price_usd is not None:
        return request.gpu_hour_price_usd
    return request.cluster.gpu_hour_price_usd


def _given(value: float | None, field: str) -> float:
    """A request field an objective needs (``check_request`` has made sure it is given)."""
    if value is None:
        raise SpecError(field, "is needed by the objective")
    return value


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
    gpu, precision = request.cluster.gpu, request.training.precision
    if not gpu.supports(precision):
        # No split can change the GPU: a precision it has no tensor-core peak for (NVFP4 on an
        # H100, FP8 on an A100) is the request's error, not an infeasible plan.
        raise SpecError("training.precision", f"{gpu.name} has no {precision.value} tensor cores", Rule.PRECISION)
    if objective is Objective.MIN_TIME_TO_TRAIN and not request.training.train_tokens:
        raise SpecError("training.train_tokens", "min_time_to_train needs a token budget (train_tokens)")
    if objective is Objective.MIN_COST:
        price = _price(request)
        if price is None:
            raise SpecError("gpu_hour_price_usd", "min_cost needs a GPU-hour price: give gpu_hour_price_usd or a cluster with a price")
        if price <= 0:
            raise SpecError("gpu_hour_price_usd", f"must be positive, got {price}")
        check_in_range("gpu_hour_price_usd", price, *GPU_HOUR_PRICE_USD_RANGE, "USD")
    if objective is Objective.MIN_GPUS:
        if not request.training.train_tokens:
            raise SpecError("training.train_tokens", "min_gpus needs a token budget (train_tokens) to compare against deadline_s")
        if request.deadline_s is None or request.deadline_s <= 0:
            raise SpecError("deadline_s", "min_gpus needs a positive deadline_s (seconds of training)")
        check_in_range("deadline_s", request.deadline_s, *DEADLINE_S_RANGE, "s")
    if request.time_budget_s <= 0:
        raise SpecError("time_budget_s", "must be positive")


def _objective_value(request: SearchRequest, step_time_s: float, num_gpus: int) -> float:
    """Lower is better: s/token, s, USD (USD/token without a token budget), or GPUs."""
    training = request.training
    per_token = step_time_s / training.tokens_per_step
    objective = request.objective if isinstance(request.objective, Objective) else Objective(request.objective)
    if objective is Objective.MAX_THROUGHPUT:
        return per_token
    if objective is Objective.MIN_TIME_TO_TRAIN:
        return per_token * _given(training.train_tokens, "training.train_tokens")
    if objective is Objective.MIN_COST:
        return gpu_time_cost_usd(per_token * (training.train_tokens or 1.0), num_gpus, _given(_price(request), "gpu_hour_price_usd"))
    return float(num_gpus)


def _usable_bytes(request: SearchRequest) -> float:
    return request.cluster.gpu.memory_bytes * request.constraints.max_memory_fraction


_FIXED = PartitionMethod.FIXED.value


def _plan(
    run: SearchRun, shape: Shape, loses: Callable[[float], bool] | None = None,
) -> list[tuple[ParallelConfig, float]] | None:
    """Configurations to evaluate for this shape, each with a lower bound on its step time from
    its exact bottleneck stage: the optimal partition with per-stage recompute (one chunk per
    stage) and the uniform partition with the least recompute per stage, where they fit. None
    where ``loses`` says that no partition of a one-chunk-per-stage pipeline can beat the plans
    held: its memory-aware bottleneck bound (``tail_bottleneck_lower_bound_ns``, which every
    partition's bottleneck is at least) already loses, so neither partition is solved."""
    request = run.request
    training = request.training
    mb = shape.micro_batch_size
    usable = _usable_bytes(request)
    if not _states_may_fit(run, shape, usable):
        return []
    uniform = shape.uniform()
    prof = run.profiles.profile(shape.profile_shape)
    rows = run.profiles.rows(shape.profile_shape, shape.base_recompute)
    m = micro_batch_count(training.global_batch_size, shape.dp_size, mb)
    problem = partition_problem(prof, uniform, training, m, usable, shape.full_recompute, request.cluster.gpu, rows)
    solutions: list[PartitionSolution] = []
    even = uniform_partition(request.model.num_layers, uniform.num_chunks)
    slots = pipeline_slots(shape.pp_size, shape.virtual_stages, m)
    comm_s = run.profiles.pipeline_comm_s(shape, m)
    layers = request.model.num_layers

    def optimum_loses(bottleneck_ns: int) -> bool:
        """Whether a plan whose slowest stage takes at least ``bottleneck_ns`` loses already."""
        return loses is not None and loses(slots * stage_time_lower_bound_s(bottleneck_ns, layers) + comm_s)

    if loses is not None and shape.virtual_stages == 1 and not _may_offload_activations(run, shape):
        # Every plan of this shape is one of the problem's partitions (the even one or the
        # optimum; no activation offload here): none is faster than the memory-aware bound.
        if optimum_loses(bottleneck_lower_bound_ns(problem)):
            return None  # the average stage loses already
        bound_ns = tail_bottleneck_lower_bound_ns(problem)
        if bound_ns >= INFEASIBLE_NS:
            return []
        if optimum_loses(bound_ns):
            return None

    fixed, best = _partitions(run, problem, even, optimum_loses)
    methods = run.stats.partition_methods
    methods[_FIXED] = methods.get(_FIXED, 0) + 1
    if fixed is not None:
        solutions.append(fixed)
    if shape.virtual_stages == 1 and shape.pp_size > 1:
        if best is not None:
            methods[best.method.value] = methods.get(best.method.value, 0) + 1
            if best.method is PartitionMethod.CPSAT:
                status = best.status.value
                run.stats.cpsat_calls += 1
                run.stats.cpsat_status[status] = run.stats.cpsat_status.get(status, 0) + 1
                run.partitions_exact &= best.status is SolveStatus.OPTIMAL
            if fixed is None or best.stage_layers != fixed.stage_layers:
                solutions.append(best)
    none_admitted = request.constraints.admits("recompute", Recompute.NONE.value)
    # The schedule runs its slots of the slowest stage; p2p and the DP tail come on top.
    planned = [
        (_to_parallel(shape, s, even, none_admitted), slots * stage_time_lower_bound_s(s.stage_time_ns, layers) + comm_s)
        for s in solutions
    ]
    # Activation offload where nothing fits without it, or beside recomputation where the
    # objective prefers fewer GPUs (issue 16's rule for offload; see _activation_offload_plan).
    fewer_gpus = request.objective in (Objective.MIN_GPUS, Objective.MIN_COST)  # a str enum: its value or member
    if fixed is None or (fewer_gpus and any(fixed.recompute_layers)):
        offloaded = _activation_offload_plan(run, shape, problem, m, usable, rows, even)
        if offloaded is not None:
            shape_n, solution = offloaded
            planned.append((_to_parallel(shape_n, solution, even, True), slots * stage_time_lower_bound_s(solution.stage_time_ns, layers) + comm_s))
    return planned


def _partitions(
    run: SearchRun, problem: PartitionProblem, even: tuple[int, ...], optimum_loses: Callable[[int], bool] | None = None,
) -> tuple[PartitionSolution | None, PartitionSolution | None]:
    """The even partition with the least recompute per stage (``even``: the uniform layer counts
    of ``problem``'s chunks), and the optimal partition of a pipeline of one chunk per stage
    (None otherwise, or where none fits). Shapes that differ only in what their problem does not
    read (ZeRO-2 and ZeRO-3 under a pipeline, ...) have equal problems: solved once per search,
    but for CP-SAT's answers, which may depend on the time left."""
    known = run.partitions.get(problem)
    if known is not None:
        return known
    if problem in run.even_partitions:
        fixed = run.even_partitions[problem]
    else:
        fixed = run.even_partitions[problem] = fixed_partition(problem, even)
    best = None
    if problem.virtual_stages == 1 and problem.num_stages > 1:
        if (
            fixed is not None and optimum_loses is not None and not problem.identical_layers and not uses_cpsat(problem)
            and optimum_loses(bottleneck_lower_bound_ns(problem))
        ):
            return fixed, None  # the optimum's plan would lose: not solved (nor kept: another shape may need it)
        best = solve(problem, max(0.5, run.deadline - time.perf_counter()), fixed.stage_time_ns if fixed else None)
    if not uses_cpsat(problem):
        run.partitions[problem] = (fixed, best)
    return fixed, best


def _activation_offload_plan(
    run: SearchRun, shape: Shape, problem: PartitionProblem, num_micro_batches: int, usable: float, rows: tuple,
    even: tuple[int, ...],
) -> tuple[Shape, PartitionSolution] | None:
    """A one-stage layout planned with the fewest leading layers' activations offloaded
    (``activation_offload_layers`` N, Megatron-core's cpu_offloading_num_layers) that make it
    fit without recomputing, or None (the search does not offload here, or no N < layers fits).
    The caller asks where the layout has no plan without it (not even recomputing every layer
    the request allows), or, for min_gpus and min_cost, where it fits only by recomputing: the
    offloaded plan then competes with the recomputing one (a GPU count may meet the deadline,
    or cost less, with copies hidden behind compute than with layers computed twice). Under
    max_throughput and min_time_to_train a layout that fits by recomputing is not offloaded,
    as issue 16 asks of offload. The smallest N: the memory freed grows with N and so do the
    host memory and the copies' time, so no larger N is better. Read off the layout's own
    partition problem (one stage: its memory less the first N layers' kept activations must
    meet the budget), then checked by the problem with N."""
    if not _may_offload_activations(run, shape):
        return None
    kept, states = problem.layer_kept_kib, problem.layer_state_kib
    in_flight = problem.in_flight[0]
    deficit = stage_memory_kib(in_flight, sum(kept), sum(states), 0) - problem.stage_budget_kib[0]
    freed, layers = 0.0, 0
    while freed < deficit and layers < len(kept) - 1:
        freed += in_flight * kept[layers]
        layers += 1
    if freed < deficit:
        run.reject(Rule.ACTIVATION_OFFLOAD_LAYERS)  # even L - 1 layers offloaded leave too much on the GPU
        return None
    request = run.request
    offloaded = replace(shape, full_recompute=False, activation_offload_layers=layers)
    prof = run.profiles.profile(shape.profile_shape)
    problem_n = partition_problem(prof, offloaded.uniform(), request.training, num_micro_batches, usable, False, request.cluster.gpu, rows)
    solution = fixed_partition(problem_n, even)
    return None if solution is None else (offloaded, solution)


def _may_offload_activations(run: SearchRun, shape: Shape) -> bool:
    """Whether ``_activation_offload_plan`` may plan ``shape`` with offloaded activations: one
    stage without recomputation or activation offload of its own, offloading nothing or the
    optimizer alone (with ZeRO-0/1), in a search that offloads activations of its own accord."""
    return not (
        shape.pp_size > 1 or shape.base_recompute is not Recompute.NONE or shape.activation_offload_layers
        or shape.offload not in (Offload.NONE, Offload.OPTIMIZER) or shape.zero_stage > 1 and shape.offload is not Offload.NONE
        or not searches_activation_offload(run)
    )


def _states_may_fit(run: SearchRun, shape: Shape, usable: float) -> bool:
    """False when the model states alone, spread perfectly over the stages, are already too
    much (nothing fits). The same for every micro-batch, recompute, interleaving and SP of a
    (tp, ep, etp, pp, dp, cp, ZeRO, offload), so computed once for them."""
    key = (shape.tp_size, shape.ep_size, shape.expert_tp_size, shape.pp_size, shape.dp_size, shape.cp_size, shape.zero_stage, shape.offload)
    if key not in run.states_fit:
        uniform, training = shape.uniform(), run.request.training
        params, experts = run.profiles.parameter_count(shape.tp_size, shape.ep_size, shape.expert_tp_size)
        state_floor = (
            state_bytes_per_parameter(uniform, training) * (params - experts) + expert_state_bytes_per_parameter(uniform, training) * experts
        ) / shape.pp_size
        run.states_fit[key] = state_floor <= allocatable_bytes(usable, training.allocator_fragmentation_fraction)
    return run.states_fit[key]


def _to_parallel(shape: Shape, solution: PartitionSolution, even: tuple[int, ...], none_admitted: bool) -> ParallelConfig:
    """The configuration of a partition solution, labelled the evaluator's way: FULL with
    per-chunk counts over a base of no recomputation, SELECTIVE with counts over a selective
    base; plain NONE / FULL when no layer or every layer is recomputed (NONE only where the
    request admits it: otherwise FULL recomputing zero layers)."""
    layers = None if solution.stage_layers == even else solution.stage_layers
    recomputed = solution.recompute_layers
    base = shape.uniform()
    if not any(recomputed):
        if shape.base_recompute is Recompute.SELECTIVE or none_admitted:
            return _relabelled(base, stage_layers=layers)
        return _relabelled(base, recompute=Recompute.FULL, stage_layers=layers, full_recompute_layers=recomputed)
    if shape.base_recompute is Recompute.NONE and all(k == n for k, n in zip(recomputed, solution.stage_layers)):
        return _relabelled(base, recompute=Recompute.FULL, stage_layers=layers)
    label = Recompute.SELECTIVE if shape.base_recompute is Recompute.SELECTIVE else Recompute.FULL
    return _relabelled(base, recompute=label, stage_layers=layers, full_recompute_layers=recomputed)


def _relabelled(base: ParallelConfig, **changes: object) -> ParallelConfig:
    """``replace(base, **changes)`` without running ParallelConfig's checks again: ``base``
    passed them, and a plan changes only its recompute label (a Recompute member) and its
    per-chunk lists, tuples of one Python int per chunk from the partition solvers
    (``PartitionSolution``). The search labels a plan for every shape it visits."""
    config = object.__new__(ParallelConfig)
    config.__dict__.update(base.__dict__, **changes)
    return config


def framework_exact(run: SearchRun, parallel: ParallelConfig, num_gpus: int) -> ParallelConfig | None:
    """What the search may return for ``parallel``. Without a framework that has a launch config
    (any, FSDP): ``parallel``. With one (``constraints.framework``): ``parallel`` where that
    framework runs it exactly, else the nearest configuration it runs exactly
    (``solver.frameworks.nearest_exact``, what its export writes: per-chunk recompute spread to
    one block size, its own layer split, ...), which the caller evaluates afresh so that the
    prediction is what the export runs; None where no configuration is exact under the request's
    training settings (a precision the framework lacks, DeepSpeed's gradient reduction under a
    pipeline) or the nearest one breaks the request's constraints. A replaced configuration is
    the nearest exact one, not proven the best exact one of its shape (``SearchRun.replaced_bound``)."""
    request = run.request
    export_format = framework_format(request.constraints.framework)
    if export_format is None:
        return parallel
    nearest = nearest_exact(request.model, request.training, parallel, export_format)
    if nearest.exact:
        return parallel
    if nearest.training != request.training:
        fields = tuple(d.field.removeprefix("training.") for d in nearest.differences if d.field.startswith("training."))
        run.framework_training = run.framework_training or (nearest.training, fields)
        run.reject(Rule.FRAMEWORK_EXACT)
        return None
    exact = _whole_recompute(request, nearest.parallel)
    if (
        not nearest_exact(request.model, request.training, exact, export_format).exact
        or not _admitted(request, exact, num_gpus)
    ):
        run.reject(Rule.FRAMEWORK_EXACT)
        return None
    return exact


def _whole_recompute(request: SearchRequest, parallel: ParallelConfig) -> ParallelConfig:
    """``parallel`` labelled the search's way when its per-chunk counts recompute every layer."""
    counts = parallel.full_recompute_layers
    if counts is not None and counts == stage_layer_counts(request.model, parallel):
        return replace(parallel, recompute=Recompute.FULL, full_recompute_layers=None)
    return parallel


def _admitted(request: SearchRequest, parallel: ParallelConfig, num_gpus: int) -> bool:
    """Whether the request's constraints admit every value of ``parallel`` (as the validator checks)."""
    admits = request.constraints.admits
    values = config_values(parallel, num_gpus)
    return all(admits(name, value) for name, value in values.items() if name != "recompute") and all(
        admits("recompute", value) for value in recompute_values(parallel)
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
    return (value, evaluation.prediction.step_time_s, num_gpus, repr(sorted(parallel_to_dict(parallel).items())))


def search_counts(
    run: SearchRun, request: SearchRequest, counts: list[int], top_k: int, accept=None, ceiling: float = float("inf")
) -> list[_Held]:
    """Best-first over the shapes of every count in ``counts``; the top ``top_k`` plans, ranked
    by ``request``'s objective. ``accept(evaluation)`` may turn down a feasible plan (min_gpus:
    the deadline); shapes whose bound exceeds ``ceiling`` cannot be accepted and are pruned.

    Counts are visited in the order of their own bound (``count_step_lower_bound_s``), so that
    a range of GPU counts stops as soon as no remaining count can beat the k-th plan."""
    held: list[_Held] = []  # ascending by key, at most top_k
    seen: set[ParallelConfig] = set()
    if len(counts) > 1:
        ordered = sorted(counts, key=lambda n: (_objective_value(request, count_step_lower_bound_s(run, n), n), n))
    else:
        ordered = list(counts)  # one count: nothing to order, and nothing held yet to prune it by
    for position, num_gpus in enumerate(ordered):
        if len(ordered) > 1 or ceiling < float("inf"):
            count_bound = _objective_value(request, count_step_lower_bound_s(run, num_gpus), num_gpus)
            if count_bound > ceiling or (len(held) >= top_k and count_bound >= held[-1].key[0]):
                run.stats.configurations_pruned += len(ordered) - position  # whole GPU counts
                break
        _search_count(run, request, num_gpus, top_k, accept, ceiling, held, seen)
    return held


def _search_count(run, request, num_gpus, top_k, accept, ceiling, held, seen) -> None:
    """Best-first over one GPU count's shapes, adding to ``held``.

    The shapes are visited in the order of (bound, shape), as if every shape were bounded and
    sorted, but a group's shapes of one micro-batch are built only when the least bound among
    them (``ShapeGroup.step_bound_floor_s``) comes up: one queue holds such entries, keyed
    (floor, the shapes' first fields, 0, position), and built shapes, keyed (bound, the same
    fields, 1, shape). An entry comes before each of its shapes (its floor is at most their bound,
    and with equal bounds 0 < 1), so a shape is built before anything that follows it; entries
    whose floor already loses are never built (the most shapes by far)."""
    stats = run.stats
    values: dict[float, float] = {}  # step bound -> its objective value (shapes share few bounds)

    def value_of(step_bound_s: float) -> float:
        value = values.get(step_bound_s)
        if value is None:
            value = values[step_bound_s] = _objective_value(request, step_bound_s, num_gpus)
        return value

    queue: list[tuple] = []
    for group in shape_groups(run, num_gpus):
        lead = (num_gpus, group.dp_size, group.tp_size, group.pp_size)  # Shape's first fields
        floors = [value_of(group.step_bound_floor_s(run, mb)) for mb in group.micro_batches]
        for offload_index in range(len(group.offloads)):
            for mb, floor in zip(group.micro_batches, floors):
                queue.append((floor, lead, 0, run.positions, group, offload_index, mb))
                run.positions += 1
    heapq.heapify(queue)

    def beaten(bound: float) -> bool:
        return bound > ceiling or (len(held) >= top_k and bound >= held[-1].key[0])

    # A plan the search returns as planned (no framework replaces it) loses where its step time's
    # lower bound does: _plan then skips solving for a partition whose plan would be pruned.
    loses = None
    if framework_format(request.constraints.framework) is None:
        loses = lambda step_bound_s: beaten(_objective_value(request, step_bound_s, num_gpus))  # noqa: E731

    while queue:
        entry = queue[0]
        if beaten(entry[0]):
            _pass_over(run, queue, record=not held)
            return
        if time.perf_counter() > run.deadline:
            stats.timed_out = True
            _pass_over(run, queue, record=not held)
            return
        heapq.heappop(queue)
        if entry[2] == 0:
            _, lead, _, position, group, offload_index, mb = entry
            for shape in _legal_members(run, group, offload_index, mb, position):
                heapq.heappush(queue, (value_of(step_lower_bound_s(run, shape)), lead, 1, shape))
            continue
        shape = entry[3]
        plans = _plan(run, shape, loses)
        if plans is None:
            stats.configurations_pruned += 1  # no partition of it can beat the k-th plan (_plan)
            continue
        if not plans:
            run.reject(Rule.MEMORY)  # no partition fits, even recomputing every layer it may
        for planned, step_bound_s in plans:
            parallel = framework_exact(run, planned, num_gpus)
            if parallel is None:
                continue
            known = len(seen)
            seen.add(parallel)  # one hash of the configuration, not two
            if len(seen) == known:
                continue  # planned before
            bound_value = _objective_value(request, step_bound_s, num_gpus)
            if parallel is not planned:  # the nearest exact plan of its shape, not proven its best
                run.replaced_bound = min(run.replaced_bound, bound_value)
            if beaten(bound_value):
                stats.configurations_pruned += 1  # its exact bottleneck already loses
                continue
            stats.configurations_evaluated += 1
            evaluation = request.evaluate(parallel, num_gpus)
            if not evaluation.feasible:
                if any(v.rule is Rule.MEMORY for v in evaluation.violations):
                    run.reject(Rule.MEMORY)
                    run.closest.append((evaluation.peak_bytes, parallel, evaluation))
                elif any(v.rule is Rule.HOST_MEMORY for v in evaluation.violations):
                    run.reject(Rule.HOST_MEMORY)  # offloaded: fits the GPU, not the host
                elif any(v.rule is Rule.NVME_CAPACITY for v in evaluation.violations):
                    run.reject(Rule.NVME_CAPACITY)  # on NVMe: fits the GPU and the host, not the drives
                continue
            if accept is not None and not accept(evaluation):
                run.reject(Rule.DEADLINE)
                continue
            value = _objective_value(request, evaluation.prediction.step_time_s, num_gpus)
            item = _Held(_rank_key(value, evaluation, parallel, num_gpus), parallel, evaluation, num_gpus, value)
            if len(held) < top_k or item.key < held[-1].key:
                bisect.insort(held, item, key=lambda h: h.key)
                del held[top_k:]


def _legal_members(run: SearchRun, group: ShapeGroup, offload_index: int, mb: int, position: int) -> list[Shape]:
    """The shapes of a group's entry that pass every rule and are not the same plan as another
    (a selective base where selective recomputation changes nothing), counted as enumerated,
    illegal or pruned, and recorded as legal at the entry's position."""
    stats = run.stats
    legal = []
    selective = Recompute.SELECTIVE
    for shape in group.members(run, offload_index, mb):
        stats.configurations_enumerated += 1
        if not is_legal(run, shape):
            stats.configurations_illegal += 1
            continue
        if shape.base_recompute is selective and dominated_selective(run, shape):
            stats.configurations_pruned += 1  # the same plan as its base-none twin
            continue
        legal.append(shape)
    run.legal_parts.append((position, legal))
    return legal


def _pass_over(run: SearchRun, queue: list[tuple], record: bool) -> None:
    """Count what is left in the queue as pruned: its built shapes, and the shapes of its
    entries (``record``: built and checked as the visited ones are, so that an explanation of a
    search without a plan reads every legal shape; else only counted)."""
    stats = run.stats
    for entry in queue:
        if entry[2] == 1:
            stats.configurations_pruned += 1
            continue
        _, _, _, position, group, offload_index, mb = entry
        if record:
            stats.configurations_pruned += len(_legal_members(run, group, offload_index, mb, position))
        else:
            count = group.member_count(run, offload_index, mb)
            stats.configurations_enumerated += count
            stats.configurations_pruned += count
    queue.clear()


def _search_min_gpus(run: SearchRun, counts: list[int]) -> list[_Held]:
    """Fewest GPUs whose best plan meets the deadline; ties broken by time to train. Counts are
    tried in increasing order."""
    request = run.request
    fastest = replace(request, objective=Objective.MIN_TIME_TO_TRAIN)
    deadline_s = _given(request.deadline_s, "deadline_s")
    meets = lambda ev: ev.prediction.time_to_train_s <= deadline_s  # noqa: E731
    found: list[_Held] = []
    for num_gpus in counts:
        if len(found) >= request.top_k:
            break
        steps = _given(request.training.train_tokens, "training.train_tokens") / request.training.tokens_per_step
        if steps * count_step_lower_bound_s(run, num_gpus) > deadline_s:
            run.stats.configurations_pruned += 1
            run.reject(Rule.DEADLINE)
            continue
        if time.perf_counter() > run.deadline:
            run.stats.timed_out = True
            break
        plans = search_counts(run, fastest, [num_gpus], request.top_k - len(found), accept=meets, ceiling=deadline_s)
        asked = (run.offload_modes, run.nvme_modes)
        for widen in (offload_fallback, nvme_fallback):
            # Fewer GPUs is the objective: offload where this count has no plan without it, to
            # NVMe where it has none with host memory either.
            if not plans and widen(run):
                plans = search_counts(run, fastest, [num_gpus], request.top_k - len(found), accept=meets, ceiling=deadline_s)
        run.offload_modes, run.nvme_modes = asked
        found.extend(replace(h, value=float(h.num_gpus)) for h in plans)
    return found


def offload_fallback(run: SearchRun) -> bool:
    """Turn the run to offload (the optimizer; and the parameters; and the activation checkpoints) for a search that found
    nothing without it: offload trades step time for memory, so it is planned only where nothing
    fits otherwise (or, for min_gpus, where a GPU count has no plan otherwise). False where the
    request names its offload values or the cluster cannot cost offload (no host facts)."""
    if "offload" in run.request.constraints.allowed or not run.request.cluster.has_host_facts:
        return False
    if time.perf_counter() > run.deadline:
        return False
    run.offload_modes = OFFLOADING
    return True


# Every offload mode that takes something off the GPU.
OFFLOADING = (Offload.OPTIMIZER, Offload.OPTIMIZER_PARAMS, Offload.OPTIMIZER_PARAMS_ACTIVATIONS)


def nvme_fallback(run: SearchRun) -> bool:
    """Turn the run to NVMe (the optimizer states; and the parameters) for a search that found
    nothing with offload to host memory either, by the same rule: NVMe is slower than host memory
    (ZeRO-Infinity Sec 4: its bandwidth is a fraction of DRAM's), so it is planned only where
    host memory cannot hold what must leave the GPU. The offload modes are the request's where it
    names them, else every mode that offloads. False where the request names its nvme_offload
    values or the cluster cannot cost NVMe (no NVMe facts)."""
    request = run.request
    if "nvme_offload" in request.constraints.allowed or not request.cluster.has_nvme_facts:
        return False
    if time.perf_counter() > run.deadline:
        return False
    if "offload" not in request.constraints.allowed:
        run.offload_modes = OFFLOADING
    run.nvme_modes = (NvmeOffload.OPTIMIZER, NvmeOffload.OPTIMIZER_PARAMS)
    return True


def find_plans(request: SearchRequest, profiles: Profiles | None = None) -> tuple[list[_Held], SearchRun]:
    """The search without ranking text or explanation: validated plans, best first.
    ``profiles``: another search's caches, shared where they serve this request."""
    started = time.perf_counter()
    check_request(request)
    run = SearchRun(request, SearchStats(), started + request.time_budget_s, shared_profiles=profiles)
    if "offload" in request.constraints.allowed:
        run.offload_modes = tuple(mode for mode in Offload if request.constraints.admits("offload", mode.value))
    if "nvme_offload" in request.constraints.allowed:
        # NVMe values named: planned with them, over every offload mode they fit unless those are named too.
        run.nvme_modes = tuple(mode for mode in NvmeOffload if request.constraints.admits("nvme_offload", mode.value))
        if "offload" not in request.constraints.allowed:
            run.offload_modes = tuple(Offload)
    counts = gpu_counts(request)
    if not counts:
        raise SpecError("constraints.num_gpus", "no GPU count fits both the constraint and the cluster")
    if Objective(request.objective) is Objective.MIN_GPUS:
        held = _search_min_gpus(run, counts)
    else:
        held = search_counts(run, request, counts, request.top_k)
        for widen in (offload_fallback, nvme_fallback):
            if not held and widen(run):
                held = search_counts(run, request, counts, request.top_k)
    accepted = []
    for item in held:
        report = validate(request, item.parallel, item.evaluation, item.num_gpus)
        if report.ok:
            accepted.append(item)
        else:  # never expected: the validator and the search disagree
            run.reject(Rule.VALIDATOR)
            run.validator_problems.append("; ".join(report.problems))
    run.stats.proven_optimal = not run.stats.timed_out and run.partitions_exact and _replacements_lose(run, held)
    run.stats.wall_time_s = time.perf_counter() - started
    return accepted, run


def _replacements_lose(run: SearchRun, held: list[_Held]) -> bool:
    """Whether no shape whose plan was replaced by its framework's nearest exact one
    (``framework_exact``) could hold a better exact plan than the k-th returned: its bound does
    not beat it (min_gpus ranks by GPU count, not by that bound: any replacement counts)."""
    if run.replaced_bound == float("inf"):
        return True
    if Objective(run.request.objective) is Objective.MIN_GPUS or len(held) < run.request.top_k:
        return False
    return run.replaced_bound >= held[-1].key[0]


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
        explanation = explain(run, find_plans)
    run.stats.wall_time_s = time.perf_counter() - started
    # A search that finished its last step after its budget ran out reports it too (it still is
    # proven optimal when it completed every step).
    run.stats.timed_out = run.stats.timed_out or run.stats.wall_time_s > request.time_budget_s
    return SearchResult(candidates, run.stats, explanation)


# --------------------------------------------------------------------------- why


# Two plans whose predicted step times differ by less than this fraction (0.1%) of the faster one
# tie in what the line says (the ranking still orders them by the exact figures): the cost model
# errs by percents on measured runs (bench/accuracy.py), so a smaller difference says nothing about
# which plan runs faster, and plans bound by one resource (a step that waits on its ZeRO-3 gathers
# whatever the compute) often come out equal to the last digit.
TIE_FRACTION = 1e-3

_PART_NAMES = {
    # The step breakdown's tp_comm_s holds every collective inside a layer: tensor and sequence
    # parallel, the context-parallel ring exchange and the MoE all-to-alls (evaluate.StepBreakdown).
    "compute_s": "compute", "recompute_s": "recomputation", "tp_comm_s": "in-layer communication (TP, CP, EP)",
    "grad_accumulation_s": "gradient accumulation",
    "pp_comm_s": "pipeline communication", "dp_comm_exposed_s": "exposed data-parallel communication",
    "bubble_s": "pipeline bubble", "optimizer_s": "optimizer step",
}


def _part(key: str, mine_s: float, theirs_s: float) -> str:
    return f"{_PART_NAMES.get(key, key)} ({mine_s:.3f} s vs {theirs_s:.3f} s per step)"


def _differing_fields(item: _Held, following: _Held) -> list[str]:
    """The configuration fields in which two plans differ (ParallelConfig's names); the expert
    TP size only where it differs from following each plan's tp_size (its default)."""
    mine, theirs = parallel_to_dict(item.parallel), parallel_to_dict(following.parallel)
    follows_tp = mine.get("expert_tp_size") == mine.get("tp_size") and theirs.get("expert_tp_size") == theirs.get("tp_size")
    return [key for key in mine if mine[key] != theirs.get(key) and not (key == "expert_tp_size" and follows_tp)]


def _why(item: _Held, following: _Held | None) -> str:
    """One line on why ``item`` ranks where it does: its step time and MFU, and what it gains on
    the next plan (``following``), or that the two tie and what each trades for it."""
    p = item.evaluation.prediction
    head = (
        f"{item.parallel.layout_text()}: "
        f"{p.step_time_s:.3f} s per step, {p.mfu:.1%} MFU"
    )
    if following is None:
        return head + "; the last plan returned"
    q = following.evaluation.prediction
    if following.num_gpus != item.num_gpus and following.value != item.value:
        return head + f"; uses {item.num_gpus} GPUs against {following.num_gpus} for the next plan"
    parts = sorted(set(p.breakdown_s) | set(q.breakdown_s))
    mine = {k: p.breakdown_s.get(k, 0.0) for k in parts}
    theirs = {k: q.breakdown_s.get(k, 0.0) for k in parts}
    gain_s = q.step_time_s - p.step_time_s
    noise_s = TIE_FRACTION * p.step_time_s
    saves = max(parts, key=lambda k: theirs[k] - mine[k])  # the part this plan gains most on
    if gain_s <= noise_s:
        # Equal step times (the same GPUs: every objective then ranks by step time); the order
        # between them is the rank key's fixed tie-break, so say what each plan spends instead.
        spends = max(parts, key=lambda k: mine[k] - theirs[k])
        trade = ""
        if theirs[saves] - mine[saves] > noise_s and mine[spends] - theirs[spends] > noise_s:
            trade = f": less {_part(saves, mine[saves], theirs[saves])} for more {_part(spends, mine[spends], theirs[spends])}"
        fields = ", ".join(_differing_fields(item, following))
        return head + f"; ties with the next plan on step time{trade}; they differ in {fields} (plans that tie are listed in a fixed order)"
    return head + f"; {gain_s:.3g} s per step faster than the next plan, mainly on {_part(saves, mine[saves], theirs[saves])}"
