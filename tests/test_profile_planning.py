"""A measured profile really drives the plan: the evaluator's step time and the optimizer's
partition follow the per-layer values it is given."""

from __future__ import annotations

from dataclasses import replace

import pytest

from catalog import get_cluster
from solver.cost.analytic import analytic_profile
from solver.cost.evaluate import evaluate
from solver.cost.profile import ModelProfile, Origin, ProfileShape
from solver.spec.model import ModelSpec
from solver.spec.parallel import ParallelConfig
from solver.spec.training import TrainingSpec

MODEL = ModelSpec(
    name="toy-2b", num_layers=8, hidden_size=2048, num_attention_heads=16, vocab_size=32000, seq_length=2048,
    tied_embeddings=False,
)
CLUSTER = get_cluster("dgx-h100-x8")
TRAINING = TrainingSpec(global_batch_size=16, seq_length=2048)
PIPELINE = ParallelConfig(pp_size=2, micro_batch_size=1, stage_layers=(4, 4))
SLOWDOWN = 10.0


def _measured(scale_layer: int | None = None, factor: float = SLOWDOWN, all_layers: float = 1.0) -> ModelProfile:
    """The analytic profile re-labelled as a measurement, optionally with one layer slowed."""
    base = analytic_profile(MODEL, CLUSTER, TRAINING, ProfileShape(1, 1, False))
    layers = []
    for layer in base.layers:
        scale = all_layers * (factor if scale_layer is not None and layer is base.transformer_layers[scale_layer] else 1.0)
        layers.append(replace(layer, forward_s=layer.forward_s * scale, backward_s=layer.backward_s * scale, origin=Origin.MEASURED))
    return replace(base, layers=tuple(layers), device="NVIDIA H100 80GB HBM3")


def test_a_profile_equal_to_the_analytic_one_predicts_the_same():
    analytic = evaluate(MODEL, CLUSTER, TRAINING, PIPELINE)
    measured = evaluate(MODEL, CLUSTER, TRAINING, PIPELINE, profile=_measured())
    assert measured.prediction.step_time_s == pytest.approx(analytic.prediction.step_time_s, rel=1e-12)
    assert set(measured.profile_origins.values()) == {"measured"}


def test_one_slow_layer_raises_its_stage_time_and_the_step_time_accordingly():
    base = evaluate(MODEL, CLUSTER, TRAINING, PIPELINE, profile=_measured())
    slow = evaluate(MODEL, CLUSTER, TRAINING, PIPELINE, profile=_measured(scale_layer=1))
    layer = _measured().transformer_layers[1]
    extra_s = (SLOWDOWN - 1) * (layer.forward_s + layer.backward_s)
    assert slow.stages[0].time_per_micro_batch_s == pytest.approx(base.stages[0].time_per_micro_batch_s + extra_s, rel=1e-9)
    assert slow.stages[1].time_per_micro_batch_s == pytest.approx(base.stages[1].time_per_micro_batch_s, rel=1e-12)
    # 1F1B: a step takes (m + p - 1) times the slowest stage (Narayanan et al. 2021, Sec 2.2).
    m, p = slow.num_micro_batches, PIPELINE.pp_size
    slowest_before = max(s.time_per_micro_batch_s for s in base.stages)
    slowest_after = max(s.time_per_micro_batch_s for s in slow.stages)
    expected_rise_s = (m + p - 1) * (slowest_after - slowest_before)
    assert slow.prediction.step_time_s - base.prediction.step_time_s == pytest.approx(expected_rise_s, rel=1e-6)
    assert slow.prediction.step_time_s > 1.5 * base.prediction.step_time_s


def test_a_uniformly_slower_measurement_scales_the_compute_time():
    base = evaluate(MODEL, CLUSTER, TRAINING, PIPELINE, profile=_measured())
    slower = evaluate(MODEL, CLUSTER, TRAINING, PIPELINE, profile=_measured(all_layers=1.3))
    assert slower.prediction.breakdown_s["compute_s"] == pytest.approx(1.3 * base.prediction.breakdown_s["compute_s"], rel=1e-9)


def test_a_profile_measured_at_another_tp_size_is_derived_and_says_so():
    parallel = ParallelConfig(tp_size=2, pp_size=2, micro_batch_size=1, stage_layers=(4, 4))
    measured = _measured(all_layers=1.3)  # measured at tp_size 1, 30% slower than the analytic model
    result = evaluate(MODEL, CLUSTER, TRAINING, parallel, profile=measured)
    assert set(result.profile_origins.values()) == {"derived"}
    analytic = evaluate(MODEL, CLUSTER, TRAINING, parallel)
    # The derived compute keeps the measurement's 30% over the analytic model at tp_size 2.
    assert result.prediction.breakdown_s["compute_s"] == pytest.approx(1.3 * analytic.prediction.breakdown_s["compute_s"], rel=1e-9)


def _best_stage_layers(profile: ModelProfile) -> tuple[int, ...]:
    from solver.search import loop as search_module
    from solver.search.request import Constraints, SearchRequest

    constraints = Constraints.parse(
        {"pp_size": 2, "tp_size": 1, "dp_size": 1, "micro_batch_size": 1, "virtual_stages": 1, "recompute": "none",
         "zero_stage": 0}
    )
    request = SearchRequest(MODEL, CLUSTER, TRAINING, num_gpus=2, constraints=constraints, top_k=1, profile=profile)
    result = search_module.search(request)
    assert result.best is not None, result.explanation
    return tuple(result.best.parallel.stage_layers or (4, 4))


@pytest.mark.parametrize("slow_layer, stage", [(0, 0), (7, 1)])
def test_the_partition_moves_layers_away_from_a_slow_layer(slow_layer, stage):
    before = _best_stage_layers(_measured())
    after = _best_stage_layers(_measured(scale_layer=slow_layer))
    assert sum(before) == sum(after) == MODEL.num_layers
    assert after[stage] < before[stage], (before, after)


def test_comparison_with_the_analytic_model_reports_per_layer_ratios():
    from profiler.compare import compare_to_analytic, comparison_table
    from solver.io.profile_format import ProfileDocument

    rows = compare_to_analytic(ProfileDocument(model=MODEL, profile=_measured(scale_layer=2, factor=3.0)), CLUSTER)
    assert [row.name for row in rows][:2] == ["embedding", "layer.0"]
    assert rows[1].ratio("forward_s") == pytest.approx(1.0) and rows[1].ratio("activation_bytes") == pytest.approx(1.0)
    assert rows[3].ratio("forward_s") == pytest.approx(3.0) and rows[3].ratio("backward_s") == pytest.approx(3.0)
    assert "layer.1" in comparison_table(rows)
