"""Partition solvers: the fast path against CP-SAT (both models), CP-SAT against brute force on
heterogeneous chains, and the partition model against the evaluator it mirrors."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

import catalog
from solver.cost.analytic import analytic_profile
from solver.cost.evaluate import evaluate
from solver.cost.profile import ProfileShape
from solver.partition.chain import solve_chain
from solver.partition.cpsat import solve_cpsat
from solver.partition.fast import solve_fast
from solver.partition.fixed import fixed_partition, stage_cost
from solver.partition.problem import NS_PER_S, PartitionProblem, partition_problem, rounding_slack_ns
from solver.partition.solve import solve
from solver.spec.legality import stage_layer_counts
from solver.spec.parallel import ParallelConfig
from solver.spec.training import Recompute, TrainingSpec, ZeroStage


def random_problem(rng: random.Random, layers: int, stages: int, identical: bool) -> PartitionProblem:
    def row(lo: int, hi: int) -> tuple[int, ...]:
        if identical:
            return (rng.randint(lo, hi),) * layers
        return tuple(rng.randint(lo, hi) for _ in range(layers))

    kept = row(500, 1000)
    checkpoint = tuple(max(1, k // 10) for k in kept)
    state = row(100, 400)
    in_flight = tuple(float(stages - i) for i in range(stages))
    per_stage = layers / stages
    budget = tuple(
        int(per_stage * (in_flight[i] * 750 * rng.uniform(0.02, 1.0) + 250 * rng.uniform(0.8, 1.6))) for i in range(stages)
    )
    ends = [rng.randint(100, 900), rng.randint(100, 900)]
    extra_time = tuple([ends[0], *[0] * (stages - 2), ends[1]])
    extra_state = tuple([ends[1], *[0] * (stages - 2), ends[0]])
    # Recomputing adds less on the last stage, as on a head's stage (its loss peak and the working set
    # are alive one after the other).
    working = rng.randint(200, 800)
    return PartitionProblem(stages, 1, row(1000, 1100), row(300, 400), kept, checkpoint, state, (working,) * (stages - 1) + (working // 2,),
                            in_flight, extra_time, extra_state, budget, True)


def _key(solution):
    return None if solution is None else (solution.stage_time_ns, solution.max_stage_state_kib)


def _check(problem: PartitionProblem, solution) -> None:
    """The solution is a valid partition whose reported objectives are its own."""
    assert sum(solution.stage_layers) == problem.num_layers and min(solution.stage_layers) >= 1
    again = fixed_partition(problem, solution.stage_layers)
    assert again is not None and again.stage_time_ns <= solution.stage_time_ns


def test_fast_path_equals_cpsat_linear_and_prefix_models():
    rng = random.Random(7)
    checked = feasible = 0
    for _ in range(40):
        layers = rng.randint(2, 20)
        stages = rng.randint(2, min(layers, 6))
        problem = random_problem(rng, layers, stages, identical=True)
        fast = solve_fast(problem)
        linear = solve_cpsat(problem, linear=True)
        prefix = solve_cpsat(problem, linear=False)
        assert _key(fast) == _key(linear) == _key(prefix)
        checked += 1
        if fast is not None:
            feasible += 1
            _check(problem, fast)
            assert fast.status == linear.status == "OPTIMAL"
    assert feasible >= 10 and checked - feasible >= 3  # both outcomes exercised


def _brute_force(problem: PartitionProblem):
    best = None
    layers, stages = problem.num_layers, problem.num_stages
    for cuts in itertools.combinations(range(1, layers), stages - 1):
        bounds = (0, *cuts, layers)
        counts = [bounds[i + 1] - bounds[i] for i in range(stages)]
        worst_time = worst_state = 0
        for stage in range(stages):
            fits = None
            for k in range(counts[stage] + 1):  # the least recompute that fits is fastest
                time_ns, memory, state = stage_cost(problem, stage, [(bounds[stage], counts[stage])], [k])
                if memory <= problem.stage_budget_kib[stage]:
                    fits = (time_ns, state)
                    break
            if fits is None:
                break
            worst_time, worst_state = max(worst_time, fits[0]), max(worst_state, fits[1])
        else:
            key = (worst_time, worst_state)
            best = key if best is None or key < best else best
    return best


def test_cpsat_and_chain_program_equal_brute_force_on_heterogeneous_chains():
    rng = random.Random(11)
    feasible = 0
    for _ in range(25):
        layers = rng.randint(3, 9)
        stages = rng.randint(2, min(layers, 4))
        problem = random_problem(rng, layers, stages, identical=False)
        solution = solve_cpsat(problem)
        truth = _brute_force(problem)
        assert _key(solution) == truth
        chain = solve_chain(problem)
        assert _key(chain) == truth
        if solution is not None:
            feasible += 1
            _check(problem, solution)
            _check(problem, chain)
            assert solution.method == "cpsat" and solution.status == "OPTIMAL"
    assert feasible >= 5


def test_chain_program_equals_fast_path_and_cpsat_on_larger_chains():
    rng = random.Random(13)
    for _ in range(6):
        layers = rng.randint(16, 40)
        stages = rng.randint(2, 8)
        identical = random_problem(rng, layers, stages, identical=True)
        assert _key(solve_chain(identical)) == _key(solve_fast(identical))
        mixed = random_problem(rng, layers, stages, identical=False)
        assert _key(solve_chain(mixed)) == _key(solve_cpsat(mixed))


def test_cpsat_is_fast_on_128_layers_and_64_stages():
    """The issue's size: both CP-SAT models well under the naive model's ~10 s, on identical
    layers and on layers whose times differ by a few percent (a measured profile)."""
    import time

    rng = random.Random(5)
    problem = random_problem(rng, 128, 64, identical=True)
    problem = replace(problem, stage_budget_kib=tuple(b * 3 for b in problem.stage_budget_kib))  # fits
    noisy = replace(problem, layer_time_ns=tuple(int(t * rng.uniform(0.98, 1.02)) for t in problem.layer_time_ns))
    for instance, reference in ((problem, solve_fast), (noisy, solve_chain)):
        started = time.perf_counter()
        solution = solve_cpsat(instance)
        assert time.perf_counter() - started < 3.0
        assert solution is not None and _key(solution) == _key(reference(instance))


def test_dispatch_uses_the_fast_path_for_identical_layers():
    problem = random_problem(random.Random(3), 16, 4, identical=True)
    assert solve(problem).method == "fast"
    hetero = random_problem(random.Random(3), 8, 3, identical=False)
    solution = solve(hetero)
    assert solution is None or solution.method == "chain"


# ---------------------------------------------------------------- the model mirrors the evaluator

GPT = catalog.get_model("gpt3-13b")
CLUSTER = catalog.cluster_spec_from_dict({**catalog.get_entry("nodes", "dgx-a100-80gb"), "num_nodes": 16})


@pytest.mark.parametrize(
    "parallel, flash",
    [
        (ParallelConfig(4, 2, 4, ZeroStage.OS, 2, Recompute.NONE), True),
        (ParallelConfig(2, 4, 4, ZeroStage.NONE, 1, Recompute.SELECTIVE, 1, True), False),
        (ParallelConfig(8, 4, 1, ZeroStage.OS_G_P, 1, Recompute.NONE), True),
        (ParallelConfig(1, 8, 4, ZeroStage.NONE, 4, Recompute.NONE, 2, True), True),
        (ParallelConfig(2, 2, 8, ZeroStage.OS, 1, Recompute.NONE, 1, False, (4, 5, 5, 5, 5, 5, 6, 5)), False),
    ],
)
def test_partition_model_matches_the_evaluator(parallel, flash):
    """At the evaluator's own peak memory (+/- 0.01%) the partition model says fits / does not
    fit, and its bottleneck time is the evaluator's to within the rounding of each layer."""
    training = TrainingSpec(512, 2048, flash_attention=flash)
    ev = evaluate(GPT, CLUSTER, training, parallel, parallel.num_gpus)
    prof = analytic_profile(GPT, CLUSTER, training, ProfileShape.of(parallel))
    m = ev.num_micro_batches
    counts = stage_layer_counts(GPT, parallel)
    roomy = partition_problem(prof, parallel, training, m, ev.peak_bytes * 1.0001, False, CLUSTER.gpu)
    tight = partition_problem(prof, parallel, training, m, ev.peak_bytes * 0.9999, False, CLUSTER.gpu)
    fits = fixed_partition(roomy, counts)
    assert fits is not None
    assert fixed_partition(tight, counts) is None
    slowest_ns = max(s.time_per_micro_batch_s for s in ev.stages) * NS_PER_S
    # Each layer's time, accumulation and recompute are rounded up to whole ns: the slack the search's
    # lower bounds allow for (problem.rounding_slack_ns), no more.
    assert slowest_ns <= fits.stage_time_ns <= slowest_ns + rounding_slack_ns(GPT.num_layers)


def test_per_stage_recompute_least_is_brute_force_least():
    training = TrainingSpec(512, 2048, flash_attention=False)
    parallel = ParallelConfig(2, 8, 8, ZeroStage.OS, 1, Recompute.NONE)
    prof = analytic_profile(GPT, CLUSTER, training, ProfileShape(8, 1, False))
    ev = evaluate(GPT, CLUSTER, training, parallel, 128)
    problem = partition_problem(prof, parallel, training, ev.num_micro_batches, 0.8 * ev.peak_bytes, True, CLUSTER.gpu)
    counts = (5,) * 8
    solution = fixed_partition(problem, counts)
    assert solution is not None and solution.recompute_layers[0] > solution.recompute_layers[-1]
    for stage, k in enumerate(solution.recompute_layers):
        first = 5 * stage
        for fewer in range(k):
            _, memory, _ = stage_cost(problem, stage, [(first, 5)], [fewer])
            assert memory > problem.stage_budget_kib[stage]
    full = replace(parallel, recompute=Recompute.FULL, full_recompute_layers=solution.recompute_layers)
    checked = evaluate(GPT, CLUSTER, training, full, 128, max_memory_fraction=0.8 * ev.peak_bytes / CLUSTER.gpu.memory_bytes)
    assert checked.feasible


def test_chain_program_closed_form_when_only_times_differ():
    """A measured profile's layers differ in time but keep the same memory: the chain program's
    closed-form recompute count must agree with brute force and CP-SAT."""
    rng = random.Random(17)
    feasible = 0
    for _ in range(25):
        layers = rng.randint(3, 9)
        stages = rng.randint(2, min(layers, 4))
        base = random_problem(rng, layers, stages, identical=True)
        problem = replace(base, layer_time_ns=tuple(rng.randint(1000, 1300) for _ in range(layers)),
                          layer_recompute_ns=tuple(rng.randint(300, 450) for _ in range(layers)))
        truth = _brute_force(problem)
        assert _key(solve_chain(problem)) == truth == _key(solve_cpsat(problem))
        feasible += truth is not None
    assert feasible >= 5
