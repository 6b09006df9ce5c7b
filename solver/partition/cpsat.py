"""CP-SAT model of the layer-to-stage partition with per-stage full recomputation.

Build, solve, extract (google/or-tools ``ortools/sat/samples`` style): ``_PartitionModel`` adds
variables, constraints and objectives in named steps; ``solve_cpsat`` runs it with explicit
parameters (one worker and a fixed seed, so results are deterministic; the time limit is a safety
net) and returns a plain ``PartitionSolution``. No OR-Tools object leaves this module.

Formulation: the decision is where stages start, not which stage each layer is on. With
``start[j]`` the first layer of stage j and prefix sums of every per-layer quantity, a stage's
time, memory and model state are differences of prefix sums at its two boundaries, read with one
element constraint per boundary and quantity (O(p) constraints, not O(L p) placement binaries).
When all layers are identical the element constraints disappear: stage j's totals are linear in
its layer count and its recomputed count. Two lexicographic phases: minimise the slowest stage
(``stage_time_ns``), then, with it fixed, the largest stage's model state.
"""

from __future__ import annotations

from itertools import accumulate

from ortools.sat.python import cp_model

from solver.partition.fixed import fixed_partition
from solver.partition.problem import (
    PartitionMethod,
    PartitionProblem,
    PartitionSolution,
    SolveStatus,
    stage_memory_kib,
    stage_time_ns,
)
from solver.spec.legality import uniform_partition

STATUS_NAMES = {
    cp_model.OPTIMAL: "OPTIMAL",
    cp_model.FEASIBLE: "FEASIBLE",
    cp_model.INFEASIBLE: "INFEASIBLE",
    cp_model.MODEL_INVALID: "MODEL_INVALID",
    cp_model.UNKNOWN: "UNKNOWN",
}


def _prefix(values: tuple[int, ...]) -> list[int]:
    return [0, *accumulate(values)]


class _PartitionModel:
    """The CP-SAT model of one PartitionProblem (v = 1: one chunk per stage)."""

    def __init__(self, problem: PartitionProblem, linear: bool) -> None:
        if problem.virtual_stages != 1:
            raise ValueError("the CP-SAT partition model covers one chunk per stage")
        if any(f != int(f) for f in problem.in_flight):
            raise ValueError("in-flight micro-batches must be whole numbers under 1F1B")
        self.problem = problem
        self.linear = linear
        self.model = cp_model.CpModel()
        p, layers = problem.num_stages, problem.num_layers
        self.n_max = layers - (p - 1)
        # count[j]: transformer layers on stage j; recomputed[j]: how many of its first layers
        # are fully recomputed; any_recompute[j]: whether recomputed[j] > 0.
        self.count: dict[int, cp_model.IntVar] = {}
        self.recomputed: dict[int, cp_model.IntVar] = {}
        self.any_recompute: dict[int, cp_model.IntVar] = {}
        # start[j]: first layer of stage j (start[p] = L); recompute_end[j] = start[j] + recomputed[j].
        self.start: dict[int, cp_model.IntVar] = {}
        self.recompute_end: dict[int, cp_model.IntVar] = {}
        # Per-stage totals (ns, KiB) and the two objectives.
        self.stage_time_ns: dict[int, cp_model.LinearExpr] = {}
        self.stage_state_kib: dict[int, cp_model.LinearExpr] = {}
        horizon = sum(problem.layer_time_ns) + sum(problem.layer_recompute_ns) + max(problem.stage_extra_time_ns)
        self.bottleneck_ns = self.model.new_int_var(0, horizon, "bottleneck_ns")
        state_horizon = sum(problem.layer_state_kib) + max(problem.stage_extra_state_kib)
        self.max_state_kib = self.model.new_int_var(0, state_horizon, "max_state_kib")

    # ---------------------------------------------------------------- build steps

    def build(self) -> "_PartitionModel":
        self._add_boundaries()
        if self.linear:
            self._add_linear_stage_totals()
        else:
            self._add_prefix_stage_totals()
        self._add_objective_bounds()
        return self

    def _add_boundaries(self) -> None:
        m, problem = self.model, self.problem
        p, layers = problem.num_stages, problem.num_layers
        for j in range(p + 1):
            lo, hi = (0, 0) if j == 0 else ((layers, layers) if j == p else (j, layers - (p - j)))
            self.start[j] = m.new_int_var(lo, hi, f"start[{j}]")
        for j in range(p):
            self.count[j] = m.new_int_var(1, self.n_max, f"count[{j}]")
            m.add(self.count[j] == self.start[j + 1] - self.start[j])
            self.recomputed[j] = m.new_int_var(0, self.n_max if problem.allow_recompute else 0, f"recomputed[{j}]")
            m.add(self.recomputed[j] <= self.count[j])
            self.any_recompute[j] = m.new_bool_var(f"any_recompute[{j}]")
            m.add(self.recomputed[j] <= self.n_max * self.any_recompute[j])
            self.recompute_end[j] = m.new_int_var(0, layers, f"recompute_end[{j}]")
            m.add(self.recompute_end[j] == self.start[j] + self.recomputed[j])

    def _add_linear_stage_totals(self) -> None:
        """Identical layers: totals are linear in count[j] and recomputed[j]."""
        m, problem = self.model, self.problem
        t, r = problem.layer_time_ns[0], problem.layer_recompute_ns[0]
        kept, ckpt, state = problem.layer_kept_kib[0], problem.layer_checkpoint_kib[0], problem.layer_state_kib[0]
        for j in range(problem.num_stages):
            f = int(problem.in_flight[j])
            self.stage_time_ns[j] = stage_time_ns(t * self.count[j], r * self.recomputed[j], problem.stage_extra_time_ns[j])
            self.stage_state_kib[j] = state * self.count[j] + problem.stage_extra_state_kib[j]
            kept_kib = kept * self.count[j] - (kept - ckpt) * self.recomputed[j]
            memory_kib = stage_memory_kib(f, kept_kib, state * self.count[j], problem.stage_working_kib[j] * self.any_recompute[j])
            m.add(memory_kib <= problem.stage_budget_kib[j])  # memory constraint of stage j

    def _add_prefix_stage_totals(self) -> None:
        """Any layers: totals are differences of prefix sums read at the stage boundaries."""
        m, problem = self.model, self.problem
        p = problem.num_stages
        prefix = {
            "time": _prefix(problem.layer_time_ns),
            "recompute": _prefix(problem.layer_recompute_ns),
            "kept": _prefix(problem.layer_kept_kib),
            "checkpoint": _prefix(problem.layer_checkpoint_kib),
            "state": _prefix(problem.layer_state_kib),
        }
        # at_start[q, j]: prefix sum q up to start[j]; at_end[q, j]: up to recompute_end[j].
        at_start: dict[tuple[str, int], cp_model.IntVar] = {}
        at_end: dict[tuple[str, int], cp_model.IntVar] = {}
        for name, values in prefix.items():
            for j in range(p + 1):
                at_start[name, j] = m.new_int_var(0, values[-1], f"{name}_at_start[{j}]")
                m.add_element(self.start[j], values, at_start[name, j])
        for name in ("recompute", "kept", "checkpoint"):
            for j in range(p):
                at_end[name, j] = m.new_int_var(0, prefix[name][-1], f"{name}_at_recompute_end[{j}]")
                m.add_element(self.recompute_end[j], prefix[name], at_end[name, j])
        for j in range(p):
            f = int(problem.in_flight[j])
            self.stage_time_ns[j] = stage_time_ns(
                at_start["time", j + 1] - at_start["time", j],
                at_end["recompute", j] - at_start["recompute", j],
                problem.stage_extra_time_ns[j],
            )
            state = at_start["state", j + 1] - at_start["state", j]
            self.stage_state_kib[j] = state + problem.stage_extra_state_kib[j]
            kept = (at_end["checkpoint", j] - at_start["checkpoint", j]) + (at_start["kept", j + 1] - at_end["kept", j])
            memory_kib = stage_memory_kib(f, kept, state, problem.stage_working_kib[j] * self.any_recompute[j])
            m.add(memory_kib <= problem.stage_budget_kib[j])  # memory constraint of stage j

    def _add_objective_bounds(self) -> None:
        for j in range(self.problem.num_stages):
            self.model.add(self.stage_time_ns[j] <= self.bottleneck_ns)
            self.model.add(self.stage_state_kib[j] <= self.max_state_kib)

    def add_bounds_from(self, solution: PartitionSolution) -> None:
        """Redundant constraints a known feasible plan justifies: the optimum is no slower, so
        stage j holds at most the number of layers whose fastest ones fit in that time, which
        narrows every boundary's domain; and the slowest stage is at least the average."""
        m, problem = self.model, self.problem
        p, layers = problem.num_stages, problem.num_layers
        m.add(self.bottleneck_ns <= solution.stage_time_ns)
        fastest = list(accumulate(sorted(problem.layer_time_ns)))
        most = []
        for j in range(p):
            room = solution.stage_time_ns - problem.stage_extra_time_ns[j]
            most.append(max(1, min(self.n_max, sum(1 for total in fastest if total <= room))))
            m.add(self.count[j] <= most[j])
        for j in range(1, p):
            m.add(self.start[j] <= sum(most[:j]))
            m.add(self.start[j] >= layers - sum(most[j:]))
        total = sum(problem.layer_time_ns) + sum(problem.stage_extra_time_ns)
        m.add(p * self.bottleneck_ns >= total)

    def add_hint(self, solution: PartitionSolution) -> None:
        """Seed the search with a known feasible plan (the greedy uniform one)."""
        self.model.clear_hints()
        first = 0
        for j, (count, recomputed) in enumerate(zip(solution.stage_layers, solution.recompute_layers)):
            self.model.add_hint(self.start[j], first)
            self.model.add_hint(self.count[j], count)
            self.model.add_hint(self.recomputed[j], recomputed)
            self.model.add_hint(self.any_recompute[j], recomputed > 0)
            self.model.add_hint(self.recompute_end[j], first + recomputed)
            first += count
        self.model.add_hint(self.start[self.problem.num_stages], first)

    # ---------------------------------------------------------------- solve and extract

    def solve(self, time_limit_s: float, num_workers: int, random_seed: int) -> tuple[str, PartitionSolution | None]:
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = time_limit_s
        solver.parameters.num_workers = num_workers
        solver.parameters.random_seed = random_seed
        self.model.minimize(self.bottleneck_ns)
        status = solver.solve(self.model)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return STATUS_NAMES.get(status, str(status)), None
        first_status = status
        bottleneck = int(solver.value(self.bottleneck_ns))
        first = self._extract(solver, SolveStatus(STATUS_NAMES[status]))
        self.add_hint(first)
        self.model.add(self.bottleneck_ns <= bottleneck)
        self.model.minimize(self.max_state_kib)
        status = solver.solve(self.model)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return STATUS_NAMES[first_status], first
        both_optimal = first_status == cp_model.OPTIMAL and status == cp_model.OPTIMAL
        return STATUS_NAMES[first_status], self._extract(solver, SolveStatus.OPTIMAL if both_optimal else SolveStatus.FEASIBLE)

    def _extract(self, solver: cp_model.CpSolver, status: SolveStatus) -> PartitionSolution:
        p = self.problem.num_stages
        counts = tuple(int(solver.value(self.count[j])) for j in range(p))
        recomputed = tuple(int(solver.value(self.recomputed[j])) for j in range(p))
        time_ns = max(int(solver.value(self.stage_time_ns[j])) for j in range(p))
        state = max(int(solver.value(self.stage_state_kib[j])) for j in range(p))
        return PartitionSolution(counts, recomputed, time_ns, state, PartitionMethod.CPSAT, status)


def greedy_partition(problem: PartitionProblem) -> PartitionSolution | None:
    """A feasible partition for the hint: under a bottleneck T each stage takes as many layers
    as fit (least recompute first), leaving one layer for every later stage; T is bisected.
    A heuristic: exact for most chains, but a stage with many in-flight micro-batches may be
    left unable to take even one layer that a cleverer split would have moved elsewhere."""
    p, layers = problem.num_stages, problem.num_layers
    time_p, recompute_p = _prefix(problem.layer_time_ns), _prefix(problem.layer_recompute_ns)
    kept_p, ckpt_p, state_p = _prefix(problem.layer_kept_kib), _prefix(problem.layer_checkpoint_kib), _prefix(problem.layer_state_kib)

    def least_recompute(stage: int, a: int, b: int, start_k: int) -> int | None:
        f, budget = problem.in_flight[stage], problem.stage_budget_kib[stage]
        for k in range(start_k, (b - a if problem.allow_recompute else 0) + 1):  # the least k that fits
            kept = ckpt_p[a + k] - ckpt_p[a] + kept_p[b] - kept_p[a + k]
            if stage_memory_kib(f, kept, state_p[b] - state_p[a], problem.stage_working_kib[stage] if k else 0) <= budget:
                return k
        return None

    def place(bound_ns: int) -> tuple[list[int], list[int]] | None:
        counts, recompute, a = [], [], 0
        for stage in range(p):
            last = layers - (p - 1 - stage)  # leave a layer for every later stage
            b, k, best = a + 1, 0, None
            while b <= last:
                least = least_recompute(stage, a, b, k)
                if least is None:
                    break
                k = least
                time_ns = stage_time_ns(time_p[b] - time_p[a], recompute_p[a + k] - recompute_p[a], problem.stage_extra_time_ns[stage])
                if time_ns > bound_ns:
                    break
                best = (b, k)
                b += 1
            if best is None or (stage == p - 1 and best[0] != layers):
                return None
            counts.append(best[0] - a)
            recompute.append(best[1])
            a = best[0]
        return counts, recompute

    lo = (sum(problem.layer_time_ns) + sum(problem.stage_extra_time_ns)) // p
    hi = sum(problem.layer_time_ns) + sum(problem.layer_recompute_ns) + max(problem.stage_extra_time_ns)
    if place(hi) is None:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if place(mid) is None:
            lo = mid + 1
        else:
            hi = mid
    placed = place(hi)  # feasible: hi only ever moves to a bound that placed
    return fixed_partition(problem, tuple(placed[0])) if placed is not None else None


def solve_cpsat(
    problem: PartitionProblem,
    time_limit_s: float = 10.0,
    num_workers: int = 1,
    random_seed: int = 0,
    linear: bool | None = None,
) -> PartitionSolution | None:
    """The optimal partition of ``problem`` by CP-SAT (None when nothing fits, or when the
    safety-net time limit passed before any plan was found). ``linear``: use the linear model
    (identical layers only); by default it is used whenever the layers are identical."""
    if linear is None:
        linear = problem.identical_layers
    if linear and not problem.identical_layers:
        raise ValueError("the linear model needs identical layers")
    builder = _PartitionModel(problem, linear).build()
    candidates = [fixed_partition(problem, uniform_partition(problem.num_layers, problem.num_stages)), greedy_partition(problem)]
    feasible = [c for c in candidates if c is not None]
    hint = min(feasible, key=lambda c: (c.stage_time_ns, c.max_stage_state_kib)) if feasible else None
    if hint is not None:
        builder.add_hint(hint)
        builder.add_bounds_from(hint)
    _, solution = builder.solve(time_limit_s, num_workers, random_seed)
    return solution
