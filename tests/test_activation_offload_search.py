"""The search's own use of partial activation offload (``activation_offload_layers``,
Megatron-core's cpu_offloading_num_layers): where a one-stage layout has no plan without it, or
beside recomputation where the objective prefers fewer GPUs (min_gpus, min_cost), the fewest
leading layers that make it fit; never where the framework cannot run it or the request pins
another value. Megatron-Bridge 26.02's Llama 3 70B FP8 run on 64 GB300 (its preset: Megatron-FSDP,
tp 1, pp 1, micro-batch 2, 20 layers offloaded)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_activation_offload import _bench_inputs

from solver.cost.evaluate import evaluate
from solver.search.loop import search
from solver.search.request import Allowed, Constraints, Objective, SearchRequest
from solver.spec.dimensions import Offload
from solver.spec.errors import SpecError
from solver.spec.parallel import ParallelConfig
from solver.spec.rules import Rule
from solver.spec.training import Framework, Recompute, ZeroStage

# The preset's layout (Megatron-FSDP is ZeRO-3).
LAYOUT = {"pp_size": [1], "tp_size": [1], "cp_size": [1], "micro_batch_size": [2], "zero_stage": [3]}


def _search(framework: Framework = Framework.MEGATRON, objective: Objective = Objective.MAX_THROUGHPUT, **pins):
    model, cluster, training = _bench_inputs("mbridge2602-dgx-gb300-llama3-70b-64gpu-fp8-cs")
    allowed = {name: Allowed(values=frozenset(values)) for name, values in {**LAYOUT, **pins}.items()}
    price = {"gpu_hour_price_usd": 6.0} if objective is Objective.MIN_COST else {}
    request = SearchRequest(
        model, cluster, training, num_gpus=64, top_k=3, objective=objective,
        constraints=Constraints(allowed=allowed, framework=framework), **price,
    )
    return request, search(request)


def test_a_layout_that_fits_only_offloaded_offloads_the_fewest_layers_that_fit():
    request, result = _search(recompute=["none"])
    (best,) = result.candidates
    # Without recomputation the layout needs 310.5 GiB of the GB300's 288; 7 of 80 layers'
    # activations (one micro-batch of 2 x 8192 tokens) in host memory fit it. (331.6 GiB and 12
    # layers while Llama 3's dropout masks, none in its training, were kept; 339.8 GiB and 14
    # before the run's in-place cross entropy, loss_kernel in_place, was costed.)
    assert best.parallel.activation_offload_layers == 7
    assert best.evaluation.feasible and result.stats.proven_optimal
    fewer = evaluate(request.model, request.cluster, request.training, replace(best.parallel, activation_offload_layers=6), num_gpus=64)
    assert any(v.rule is Rule.MEMORY for v in fewer.violations)
    # The copies hide behind compute (180 GB/s over NVLink-C2C): the step is the layout's own.
    kept = evaluate(request.model, request.cluster, request.training, replace(best.parallel, activation_offload_layers=0), num_gpus=64)
    assert best.evaluation.prediction.step_time_s == pytest.approx(kept.prediction.step_time_s)


def test_max_throughput_recomputes_where_the_layout_fits_by_recomputing():
    # Issue 16's rule: offload only where nothing fits without it.
    _, result = _search()
    assert result.candidates
    assert all(c.parallel.activation_offload_layers == 0 for c in result.candidates)
    assert any(c.parallel.full_recompute_layers for c in result.candidates)


def test_min_cost_weighs_offload_against_recomputation():
    _, result = _search(objective=Objective.MIN_COST)
    first, second = result.candidates[:2]
    assert (first.parallel.activation_offload_layers, second.parallel.activation_offload_layers) == (7, 0)
    assert second.parallel.full_recompute_layers == (8,)
    # 8 layers recomputed cost 6.770 s a step, 7 offloaded 6.565 s: 3.0% less. (13 recomputed or
    # 12 offloaded, 6.898 and 6.565 s, while Llama 3's dropout masks, none in its training, were
    # kept; 15 recomputed, 6.950 s, before the in-place cross entropy was costed; 6.424 and 6.820 s
    # with 16 recomputed before the softmax's exponentials were charged and before the head's
    # stage was charged max(loss peak, working set) in the partition problem as in the evaluator.)
    assert first.evaluation.prediction.step_time_s == pytest.approx(6.565, abs=0.005)
    assert second.evaluation.prediction.step_time_s == pytest.approx(6.770, abs=0.005)


def test_frameworks_without_it_and_pinned_values_are_never_offloaded():
    _, torchtitan = _search(Framework.TORCHTITAN, recompute=["none"])
    assert not torchtitan.candidates and torchtitan.explanation.binding_constraint == "memory"
    _, pinned = _search(recompute=["none"], activation_offload_layers=[0])
    assert not pinned.candidates
    _, any_framework = _search(Framework.ANY, recompute=["none"])
    assert any_framework.candidates[0].parallel.activation_offload_layers == 7


@pytest.mark.parametrize(
    "offload, zero, legal",
    [
        (Offload.OPTIMIZER, ZeroStage.OS, True),  # Megatron-core's optimizer CPU offload beside it
        (Offload.OPTIMIZER, ZeroStage.OS_G_P, False),  # gradients streamed beside the activations: no framework
        (Offload.OPTIMIZER_PARAMS, ZeroStage.OS_G_P, False),  # ZeRO-Infinity is DeepSpeed's, which has no partial activation offload
    ],
)
def test_activation_offload_composes_with_model_state_offload_as_megatron_core_runs_them(offload, zero, legal):
    model, cluster, training = _bench_inputs("mbridge2602-dgx-gb300-llama3-70b-64gpu-fp8-cs")
    parallel = ParallelConfig(64, 1, 1, zero, 2, Recompute.NONE, offload=offload, activation_offload_layers=14)
    if legal:
        assert evaluate(model, cluster, training, parallel, num_gpus=64).host_bytes_per_node > 0
    else:
        with pytest.raises(SpecError) as error:
            evaluate(model, cluster, training, parallel, num_gpus=64)
        assert error.value.rule is Rule.ACTIVATION_OFFLOAD_LAYERS
