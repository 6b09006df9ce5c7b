"""Fast paths of the partition solvers against their references: the chain program with an
identical tail (solver/partition/tail.py) against the full chain program and brute force, on
random chains of a few distinct layers followed by identical ones (the shape of an MoE model with
dense layers first) and on DeepSeek-V3's own problems; the fixed partition's identical-layer forms
against the per-layer sums they replace."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np

import catalog
from solver.cost.analytic import analytic_profile
from solver.cost.profile import ProfileShape
from solver.partition.chain import solve_chain, sorted_unique
from solver.partition.fast import solve_fast
from solver.partition.fixed import fixed_partition, stage_cost
from solver.partition.problem import INFEASIBLE_NS, PartitionProblem, partition_problem, stage_memory_kib
from solver.partition.solve import solve
from solver.partition.tail import (
    _max_end,
    _reachable,
    _reaches_end,
    identical_tail_start,
    solve_tail,
    tail_bottleneck_lower_bound_ns,
)
from solver.spec.parallel import ParallelConfig
from solver.spec.training import Recompute, TrainingSpec, ZeroStage
from tests.test_partition import _brute_force, _key, random_problem

ROWS = ("layer_time_ns", "layer_recompute_ns", "layer_kept_kib", "layer_checkpoint_kib", "layer_state_kib")


def head_then_tail(rng: random.Random, layers: int, stages: int, head: int) -> PartitionProblem:
    """``head`` layers drawn independently, then identical layers (the rest of a random problem)."""
    distinct = random_problem(rng, layers, stages, identical=False)
    same = random_problem(rng, layers, stages, identical=True)
    rows = {name: getattr(distinct, name)[:head] + getattr(same, name)[head:] for name in ROWS}
    return replace(distinct, **rows, allow_recompute=rng.random() < 0.8)


def test_tail_equals_the_chain_program_on_random_head_then_tail_chains():
    """The same solution, not only the same objectives: the layer counts and recomputed layers
    decide the plan the search returns, with or without an upper bound on the bottleneck."""
    rng = random.Random(23)
    feasible = 0
    for _ in range(300):
        layers = rng.randint(2, 24)
        stages = rng.randint(2, min(layers, 8))
        problem = head_then_tail(rng, layers, stages, rng.randint(0, min(layers - 1, 5)))
        bound = rng.choice([None, rng.randint(1_000, 30_000)])
        solution = solve_tail(problem, bound)
        assert solution == solve_chain(problem, bound)
        feasible += solution is not None
    assert feasible >= 100


def test_tail_equals_brute_force_on_small_chains():
    rng = random.Random(29)
    feasible = 0
    for _ in range(25):
        layers = rng.randint(3, 9)
        stages = rng.randint(2, min(layers, 4))
        problem = replace(head_then_tail(rng, layers, stages, rng.randint(1, 3)), allow_recompute=True)
        truth = _brute_force(problem)
        assert _key(solve_tail(problem)) == truth
        feasible += truth is not None
    assert feasible >= 5


def test_identical_tail_start():
    problem = head_then_tail(random.Random(31), 12, 3, 3)
    assert identical_tail_start(problem) in (0, 1, 2, 3)  # a drawn head layer may equal the tail's
    assert identical_tail_start(replace(problem, layer_time_ns=problem.layer_time_ns[:-1] + (1,))) == 11


def test_identical_tail_start_is_the_first_layer_of_the_identical_run():
    rng = random.Random(37)
    for _ in range(300):
        layers = rng.randint(1, 12)
        problem = head_then_tail(rng, layers, rng.randint(1, layers), rng.randint(0, layers - 1))
        rows = [getattr(problem, name) for name in ROWS]
        if rng.random() < 0.5:  # a difference inside the identical run
            layer = rng.randrange(layers)
            rows[0] = rows[0][:layer] + (rows[0][layer] + 1,) + rows[0][layer + 1:]
            problem = replace(problem, layer_time_ns=rows[0])
        expected = next(a for a in range(layers) if all(row[a:] == (row[-1],) * (layers - a) for row in rows))
        assert identical_tail_start(problem) == expected


def test_reaches_end_equals_the_stage_by_stage_reachability():
    """The bisections' feasibility test (through the head stage by stage, then the identical
    run's closed form) against every stage's reachable boundaries, on random counts of allowed
    ranges, several bounds at once and one alone."""
    rng = np.random.default_rng(41)
    reached = 0
    for _ in range(3000):
        layers = int(rng.integers(1, 16))
        stages, head = int(rng.integers(1, layers + 2)), int(rng.integers(0, layers))
        most = layers - np.arange(head + 1)  # ranges from start a: at most L - a
        counts = np.minimum(most, (rng.random((3, stages, head + 1)) * (most + 1) * rng.uniform(0.3, 1.3)).astype(np.int64))
        expected = _reachable(_max_end(counts, layers))[-1][..., layers]
        assert (_reaches_end(counts, layers) == expected).all()
        assert bool(_reaches_end(counts[0], layers)) == bool(expected[0])
        reached += int(expected.sum())
    assert 1000 < reached < 8000  # both answers are common


def test_deepseek_v3_partitions_through_the_tail_as_the_chain_program_would():
    """DeepSeek-V3: 3 dense layers, then 58 identical MoE layers. ``solve`` takes the tail
    path, and its partition is the chain program's for every stage count the search tries."""
    model = catalog.get_model("deepseek-v3")
    cluster = catalog.get_cluster("hgx-h800-x256")
    training = TrainingSpec(15360, 4096)
    profile = analytic_profile(model, cluster, training, ProfileShape(1, 1, False, 1, 8))
    for pp in (4, 8, 16, 32):
        parallel = ParallelConfig(2048 // pp, 1, pp, ZeroStage.OS, 1, Recompute.NONE, ep_size=8)
        m = training.global_batch_size // parallel.dp_size
        problem = partition_problem(profile, parallel, training, m, cluster.gpu.memory_bytes, True, cluster.gpu)
        assert identical_tail_start(problem) == model.first_dense_layers
        solution = solve(problem)
        assert solution == solve_chain(problem)


def test_tail_bound_never_exceeds_the_optimal_bottleneck():
    """The search prunes a shape when the identical tail's relaxation already loses
    (``tail_bottleneck_lower_bound_ns``): it must never exceed the exact optimum (nor any fixed
    partition's bottleneck), say infeasible only where nothing fits, and equal the optimum where
    every layer is identical (the relaxation then is the fast path's own problem)."""
    rng = random.Random(43)
    feasible = tight = infeasible = 0
    for _ in range(600):
        layers = rng.randint(2, 24)
        stages = rng.randint(2, min(layers, 8))
        problem = head_then_tail(rng, layers, stages, rng.randint(0, min(layers - 1, 5)))
        bound = tail_bottleneck_lower_bound_ns(problem)
        optimum = solve_chain(problem)
        if optimum is None:
            infeasible += bound == INFEASIBLE_NS
            continue
        feasible += 1
        assert bound <= optimum.stage_time_ns
        tight += bound == optimum.stage_time_ns
        counts = sorted(rng.sample(range(1, layers), stages - 1))
        fixed = fixed_partition(problem, tuple(b - a for a, b in zip([0, *counts], [*counts, layers])))
        assert fixed is None or bound <= fixed.stage_time_ns
    assert feasible >= 200 and tight >= 50 and infeasible >= 50
    for _ in range(200):
        layers = rng.randint(2, 24)
        problem = random_problem(rng, layers, rng.randint(2, min(layers, 8)), identical=True)
        optimum = solve_fast(problem)
        if optimum is not None:
            assert tail_bottleneck_lower_bound_ns(problem) == optimum.stage_time_ns


def test_tail_bound_on_deepseek_v3_problems():
    """DeepSeek-V3's problems (3 dense layers, 58 MoE): the relaxation is below the tail solver's
    optimum and within a few percent of it (it is what prunes most MoE shapes in the search)."""
    model = catalog.get_model("deepseek-v3")
    cluster = catalog.get_cluster("hgx-h800-x256")
    training = TrainingSpec(15360, 4096)
    for tp, etp, ep, pp, mb in ((1, None, 8, 16, 1), (2, 1, 8, 16, 1), (4, 1, 16, 8, 2), (2, None, 8, 32, 1)):
        profile = analytic_profile(model, cluster, training, ProfileShape(tp, mb, tp > 1, 1, ep, etp))
        parallel = ParallelConfig(2048 // (tp * pp), tp, pp, ZeroStage.OS, mb, Recompute.NONE, ep_size=ep, expert_tp_size=etp)
        m = training.global_batch_size // (parallel.dp_size * mb)
        problem = partition_problem(profile, parallel, training, m, cluster.gpu.memory_bytes, True, cluster.gpu)
        optimum = solve(problem)
        bound = tail_bottleneck_lower_bound_ns(problem)
        assert optimum is not None and 0.75 * optimum.stage_time_ns <= bound <= optimum.stage_time_ns


# ------------------------------------------------------- identical layers: the fixed partition


def _stage_cost_per_layer(problem: PartitionProblem, stage: int, chunks, recomputed):
    """``fixed.stage_cost`` as it sums layer by layer (the reference for its identical-layer form)."""
    time_ns, kept, state = problem.stage_extra_time_ns[stage], 0, problem.stage_extra_state_kib[stage]
    for (first, count), k in zip(chunks, recomputed):
        for layer in range(first, first + count):
            full = layer < first + k
            time_ns += problem.layer_time_ns[layer] + (problem.layer_recompute_ns[layer] if full else 0)
            kept += problem.layer_checkpoint_kib[layer] if full else problem.layer_kept_kib[layer]
            state += problem.layer_state_kib[layer]
    working = problem.stage_working_kib[stage] if any(recomputed) else 0
    memory = stage_memory_kib(problem.in_flight[stage], kept, state - problem.stage_extra_state_kib[stage], working)
    return time_ns, memory, state


def test_identical_stage_cost_equals_the_per_layer_sum():
    rng = random.Random(37)
    for _ in range(200):
        layers, stages = rng.randint(16, 40), rng.randint(2, 4)
        problem = random_problem(rng, layers, stages, identical=True)
        stage = rng.randrange(stages)
        counts = [rng.randint(1, 5) for _ in range(rng.randint(1, 3))]
        firsts = [sum(counts[:j]) for j in range(len(counts))]
        chunks = list(zip(firsts, counts))
        recomputed = [rng.randint(0, 6) for _ in counts]
        assert stage_cost(problem, stage, chunks, recomputed) == _stage_cost_per_layer(problem, stage, chunks, recomputed)


def _fixed_partition_per_layer(problem: PartitionProblem, chunk_layers: tuple[int, ...]):
    """``fixed_partition`` as it was written for any chain: per stage, from the closed-form least
    recompute up, the first total (spread over the stage's chunks, earlier first) whose per-layer
    sums fit."""
    p = problem.num_stages
    starts = [sum(chunk_layers[:c]) for c in range(len(chunk_layers))]
    recompute, worst_time, worst_state = [0] * len(chunk_layers), 0, 0
    for stage in range(p):
        mine = list(range(stage, len(chunk_layers), p))
        chunks = [(starts[c], chunk_layers[c]) for c in mine]
        held = sum(chunk_layers[c] for c in mine)
        for total in range(held + 1 if problem.allow_recompute else 1):
            base, extra = divmod(total, len(mine))
            counts = [min(base + (1 if j < extra else 0), chunk_layers[c]) for j, c in enumerate(mine)]
            time_ns, memory, state = _stage_cost_per_layer(problem, stage, chunks, counts)
            if memory <= problem.stage_budget_kib[stage]:
                break
        else:
            return None
        for c, k in zip(mine, counts):
            recompute[c] = k
        worst_time, worst_state = max(worst_time, time_ns), max(worst_state, state)
    return (tuple(chunk_layers), tuple(recompute), worst_time, worst_state)


def test_fixed_partition_of_identical_layers_in_chunks_equals_the_per_layer_sums():
    """Interleaved pipelines (v chunks per stage, equal or not): the same recompute per chunk,
    worst time and state as the per-layer loop."""
    rng = random.Random(43)
    feasible = 0
    for _ in range(300):
        stages, virtual = rng.randint(2, 5), rng.randint(1, 4)
        chunk_layers = tuple(rng.randint(1, 5) for _ in range(stages * virtual))
        if rng.random() < 0.5:
            chunk_layers = (chunk_layers[0],) * len(chunk_layers)
        base = random_problem(rng, sum(chunk_layers), stages, identical=True)
        problem = replace(base, virtual_stages=virtual, in_flight=tuple(float(rng.randint(1, 12)) for _ in range(stages)),
                          allow_recompute=rng.random() < 0.8)
        solution = fixed_partition(problem, chunk_layers)
        got = None if solution is None else (solution.stage_layers, solution.recompute_layers, solution.stage_time_ns, solution.max_stage_state_kib)
        expected = _fixed_partition_per_layer(problem, chunk_layers)
        assert got == expected
        feasible += expected is not None
    assert feasible >= 20


def test_fixed_partition_of_any_chain_equals_the_per_layer_sums():
    """Layers that differ (an MoE model's, a measured profile's), one chunk per stage or several,
    empty chunks and checkpoints larger than what a layer keeps among them: the same recompute
    per chunk, worst time and state as trying every total with the per-layer sums (the least
    total is found by bisection where memory falls with it)."""
    rng = random.Random(47)
    feasible = 0
    for _ in range(400):
        stages, virtual = rng.randint(1, 5), rng.choice((1, 1, 2, 3))
        chunk_layers = tuple(rng.randint(0 if rng.random() < 0.1 else 1, 6) for _ in range(stages * virtual))
        if sum(chunk_layers) == 0:
            continue
        base = random_problem(rng, sum(chunk_layers), max(stages, 2), identical=False)
        checkpoints = base.layer_checkpoint_kib
        if rng.random() < 0.2:  # a layer whose checkpoint outweighs what it keeps
            layer = rng.randrange(len(checkpoints))
            checkpoints = checkpoints[:layer] + (base.layer_kept_kib[layer] * 2,) + checkpoints[layer + 1:]
        problem = replace(
            base, num_stages=stages, virtual_stages=virtual, layer_checkpoint_kib=checkpoints,
            in_flight=tuple(float(rng.randint(1, 12)) for _ in range(stages)),
            stage_extra_time_ns=base.stage_extra_time_ns[:stages], stage_extra_state_kib=base.stage_extra_state_kib[:stages],
            stage_working_kib=base.stage_working_kib[:stages],
            stage_budget_kib=tuple(int(b * rng.uniform(0.5, 2.5)) for b in base.stage_budget_kib[:stages]),
            allow_recompute=rng.random() < 0.9,
        )
        if problem.identical_layers:
            continue
        solution = fixed_partition(problem, chunk_layers)
        got = None if solution is None else (solution.stage_layers, solution.recompute_layers, solution.stage_time_ns, solution.max_stage_state_kib)
        expected = _fixed_partition_per_layer(problem, chunk_layers)
        assert got == expected
        feasible += expected is not None and any(expected[1])
    assert feasible >= 40  # feasible plans that recompute some layers


def test_fixed_partition_of_identical_layers_equals_the_least_fitting_recompute():
    """One chunk per stage: each stage's least recompute that fits, found by trying every count
    with the per-layer sums, and the same worst time and state."""
    rng = random.Random(41)
    feasible = 0
    for _ in range(300):
        layers = rng.randint(2, 40)
        stages = rng.randint(2, min(layers, 8))
        problem = replace(random_problem(rng, layers, stages, identical=True), allow_recompute=rng.random() < 0.8)
        cuts = sorted(rng.sample(range(1, layers), stages - 1))
        counts = tuple(b - a for a, b in zip([0, *cuts], [*cuts, layers]))
        expected: tuple | None = None
        recompute, worst_time, worst_state = [], 0, 0
        for stage, held in enumerate(counts):
            chunk = [(sum(counts[:stage]), held)]
            options = range(held + 1) if problem.allow_recompute else range(1)
            fits = [k for k in options if _stage_cost_per_layer(problem, stage, chunk, [k])[1] <= problem.stage_budget_kib[stage]]
            if not fits:
                break
            time_ns, _memory, state = _stage_cost_per_layer(problem, stage, chunk, [fits[0]])
            recompute.append(fits[0])
            worst_time, worst_state = max(worst_time, time_ns), max(worst_state, state)
        else:
            expected = (counts, tuple(recompute), worst_time, worst_state)
        solution = fixed_partition(problem, counts)
        got = None if solution is None else (solution.stage_layers, solution.recompute_layers, solution.stage_time_ns, solution.max_stage_state_kib)
        assert got == expected
        feasible += expected is not None
    assert feasible >= 50


def test_sorted_unique_is_np_unique():
    rng = np.random.default_rng(53)
    for _ in range(500):
        size = int(rng.integers(0, 40))
        values = rng.integers(-6, 6, size=(size, 2)).astype(np.float64 if rng.random() < 0.7 else np.int64)
        if values.dtype.kind == "f":
            values[rng.random(values.shape) < 0.1] = np.inf
            if rng.random() < 0.2:
                values[rng.random(values.shape) < 0.1] = np.nan
        expected, got = np.unique(values), sorted_unique(values)
        assert got.dtype == expected.dtype and np.array_equal(got, expected, equal_nan=True)
