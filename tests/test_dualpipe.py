"""DeepSeek-V3's DualPipe schedule (arXiv 2412.19437 Sec 3.2.1, Table 2): its bubble against
1F1B's on a worked example, its legality, and the DeepSeek-V3 report row of the bench running it."""

from __future__ import annotations

import dataclasses

import pytest

from bench.accuracy import _candidates, _cluster_for, _model_for, load_inputs, load_moe_records, record_settings, training_for
from solver.cost.evaluate import evaluate
from solver.cost.schedule import (
    WEIGHT_GRAD_SHARE_OF_BACKWARD,
    check_pipeline_schedule,
    dualpipe_bubble_s,
    dualpipe_time_s,
    one_f_one_b_bubble_s,
)
from solver.spec.errors import SpecError
from solver.spec.training import PipelineSchedule

REPORT_ROW = "moe-deepseekv3-report-2048gpu"


def test_table_2_bubbles_on_a_worked_example():
    # PP 8, F = 1 s, B = 2 s, W = 1 s, F&B = F + B = 3 s (the overlap hides communication only).
    assert one_f_one_b_bubble_s(8, 1.0, 2.0) == pytest.approx(7 * 3.0)  # (PP - 1)(F + B) = 21
    assert dualpipe_bubble_s(8, 3.0, 2.0, 1.0) == pytest.approx(3 * (3.0 + 2.0 - 3.0))  # (PP/2 - 1)(F&B + B - 3W) = 6
    # Two stages: DualPipe has no bubble, 1F1B one slot.
    assert dualpipe_bubble_s(2, 3.0, 2.0, 1.0) == 0.0
    assert one_f_one_b_bubble_s(2, 1.0, 2.0) == pytest.approx(3.0)


def test_dualpipe_step_takes_w_as_half_of_backward_and_recompute_into_b():
    assert WEIGHT_GRAD_SHARE_OF_BACKWARD == 0.5  # dgrad and wgrad GEMMs of equal FLOPs
    busy, bubble = dualpipe_time_s(stage_s=3.0, backward_s=2.0, recompute_s=0.0, pp_size=8, num_micro_batches=20)
    assert busy == pytest.approx(20 * 3.0)
    assert bubble == pytest.approx(6.0)  # the worked example: W = 2 / 2 = 1
    _, with_recompute = dualpipe_time_s(3.0, 2.0, 0.5, 8, 20)
    assert with_recompute == pytest.approx(3 * (3.0 + 2.5 - 3.0))


@pytest.mark.parametrize(
    ("pp_size", "virtual_stages", "num_micro_batches", "field"),
    [(7, 1, 20, "parallel.pp_size"), (1, 1, 20, "parallel.pp_size"), (8, 1, 21, "parallel.micro_batch_size"), (8, 2, 20, "parallel.virtual_stages")],
)
def test_dualpipe_needs_even_stages_and_micro_batches_and_no_interleaving(pp_size, virtual_stages, num_micro_batches, field):
    with pytest.raises(SpecError) as error:
        check_pipeline_schedule(PipelineSchedule.DUALPIPE, pp_size, virtual_stages, num_micro_batches)
    assert error.value.field == field
    check_pipeline_schedule(PipelineSchedule.ONE_F_ONE_B, pp_size, virtual_stages, num_micro_batches)  # 1F1B: any


def _report_row():
    (record,) = [r for r in load_moe_records() if r["id"] == REPORT_ROW]
    inputs = load_inputs()
    settings = record_settings(record, inputs)
    model = _model_for(record, settings)
    cluster = _cluster_for(record, settings)
    training = training_for(record, settings, model)
    parallel = next(p for p in _candidates(record, settings, model, training.global_batch_size) if p.micro_batch_size == 1)
    return model, cluster, training, parallel, record["cluster"]["gpus"]


def test_the_deepseek_report_row_runs_dualpipe_and_its_bubble_is_table_2s():
    model, cluster, training, parallel, gpus = _report_row()
    assert training.pipeline_schedule is PipelineSchedule.DUALPIPE
    dualpipe = evaluate(model, cluster, training, parallel, num_gpus=gpus)
    one_f_one_b = evaluate(model, cluster, dataclasses.replace(training, pipeline_schedule="1f1b"), parallel, num_gpus=gpus)
    slowest = max(dualpipe.stages, key=lambda stage: stage.time_per_micro_batch_s).time_per_micro_batch_s
    assert one_f_one_b.prediction.breakdown_s.bubble_s == pytest.approx((parallel.pp_size - 1) * slowest)
    bubble = dualpipe.prediction.breakdown_s.bubble_s
    # (PP/2 - 1)(F&B + B - 3W) with B and W a part of the stage's time: between 7 x F&B / 2 and 7 x F&B.
    assert (parallel.pp_size / 2 - 1) * slowest / 2 < bubble < (parallel.pp_size / 2 - 1) * slowest
    assert dualpipe.prediction.breakdown_s.pp_comm_s < one_f_one_b.prediction.breakdown_s.pp_comm_s  # sends hidden
    assert dualpipe.prediction.step_time_s < one_f_one_b.prediction.step_time_s
