"""The published peak-memory bench (bench/memory.py, issue 13 mechanism 5), deterministically.

The issue's target, every figure within 10%, is not met yet (the bench prints how far off each
one is); these tests keep the data file honest and the result from degrading: a floor on the
figures within 10% at today's count and a loose ceiling on the MAPE.
"""

from __future__ import annotations

import math
import re

import pytest

from bench.memory import (
    OUT_OF_MEMORY,
    WITHIN_TARGET,
    evaluate_all,
    load_document,
    load_records,
    not_expressible,
    report_lines,
    summarize,
)

# Today's result (bench/memory.py): 73 of 87 within 10%, MAPE 7.4%, and 5 of the 6 runs that ran
# out of memory said not to fit: DeepSpeed's ZeRO-1 flattens its reduce buckets after backward and its
# step copies one gradient at a time for the overflow check (fp32) and the norm (fp64), each in
# segments of its own (solver.cost.stage.step_phases; BLOOM's fp16 figures 11.4 -> 7.9% and 6.6 ->
# 6.4%). Before that, 65 of 87, MAPE 8.0%: DeepSpeed's bf16 gradient reduce casts every gradient of the stage
# to bf16 after backward (TrainingSpec.reduce_cast_bytes_per_param; BLOOM's 02-28 figures 11.7 ->
# 2.4%). Before that, 53 of 87, MAPE 9.9%: the reserved figures hold the segments DeepSpeed's ZeRO-1/2 step
# copy takes beside the activations' cached blocks (solver.cost.stage.step_copy_segment_bytes;
# BLOOM's fp16 02-21 and 02-25 figures 17.1 -> 11.4% and 10.8 -> 6.6%). Before that, 45 of 87, MAPE
# 11.7%: BigScience's 02-25 and 02-28 benchmarks joined (17 figures each,
# 10.8% and 11.7%, and 3 OOM splits each; the 02-28 ones on DeepSpeed's BF16_Optimizer, 2 + 4 bytes
# of gradient per parameter), after the allocator's overhead was costed. Before them, 33 of 53, MAPE 11.9%: the caching allocator's
# overhead is a stack fact, measured for Megatron-DeepSpeed from BigScience's logs (0.15 of the
# allocated peak, not 0.05; BLOOM's 15 figures 23.5 -> 17.1%). Before that, 30 of 53 within 10%,
# MAPE 13.7%: DeepSpeed's ZeRO-1/2 step
# copies its whole partition to fp32 (stage_1_and_2.py; BLOOM's dp 1 probe -28.3 -> -4.0%). Before
# that, 29 of 53 within 10%, MAPE 14.6%, after BigScience's 15 BLOOM
# benchmark figures from Jean Zay joined the bench (all 17-45% under: Megatron-DeepSpeed's memory is
# not all modelled yet). Before them, 29 of 38 within 10%, MAPE 9.9%: DeepSpeed ZeRO-3's optimizer step
# copies each sub-group's gradients to fp32 after backward has freed the activations
# (step_grad_copy_bytes_per_param; the GPT-2 12B record -15.8 -> +8.4%). Before that (28 of 38,
# 10.1%): torchtitan's column-parallel
# GEMMs keep their all-gathered inputs under sequence parallelism (sp_saved_input, 10.2% before).
# Before that (28 of 38, 10.2%): eager PyTorch's cross entropy over vocabulary-sharded logits
# under tensor parallelism (DTensor's loss parallel, 16 bytes per logit
# against the single kernels' 12; analytic.loss_peak_bytes_per_logit). Before that (27 of 38, 11.2%):
# each layer's backward writing its input gradients beside its activations (solver.cost.analytic.backward_working_bytes; 11.4%
# before, the loss's peak still above it on most records). Before that: the head's loss peak and the
# recompute working set taken as the larger of the two (they are never alive together), autocast's
# 16-bit weight copies and fp32 gradients, DDP's bucket copy of the gradients, and the logits kept
# through backward by torchtitan before #391 (24 of 38, 10.9% before). Before that: the cross entropy's peak
# taken at the start of its backward and as each run's loss ran it (loss_kernel: fused, compiled,
# eager; 15 of 38 and 16.5% before), each figure compared with
# the quantity it counts (allocated, reserved or device-used), the loss's working set charged
# as each stack computes its cross entropy (12 of 38 and 20.7% before; 8 of 37 and 28.8% before
# each run named the stack that ran it, so that torchtitan's per-op selective recompute and
# Megatron's fp32 main grads apply). Raise the floor and lower the ceiling as the memory model
# improves; never the other way. The ceiling is loose on purpose (today + 8 points): it catches
# a gross regression, not the drift of a term being reworked.
WITHIN_TARGET_FLOOR = 73
MAPE_CEILING = 0.11

RECORD_FIELDS = ("id", "source", "where_in_source", "quoted", "measured_gib", "measures", "run")
RUN_FIELDS = (
    "seq_length", "node", "num_gpus", "precision", "optimizer", "dp_size", "tp_size", "pp_size",
    "zero_stage", "micro_batch_size", "global_batch_size", "recompute", "sequence_parallel", "flash_attention",
)


@pytest.fixture(scope="module")
def results():
    return evaluate_all()


def test_every_record_is_sourced_and_quoted():
    document = load_document()
    records = load_records()
    assert len(records) >= 10
    ids = [record["id"] for record in records]
    assert len(ids) == len(set(ids))
    for record in records:
        ran_out = record["measures"] == OUT_OF_MEMORY
        missing = [name for name in RECORD_FIELDS if record.get(name) in (None, "") and not (ran_out and name == "measured_gib")]
        assert not missing, (record.get("id"), missing)
        assert record["measures"] in document["measures"], record["id"]
        assert record["source"].strip() and record["where_in_source"].strip() and record["quoted"].strip()
        if ran_out:  # no figure: the quote says the run ran out of memory
            assert record["measured_gib"] is None and "OOM" in record["quoted"], record["id"]
            continue
        assert math.isfinite(record["measured_gib"]) and record["measured_gib"] > 0, record["id"]
        missing_run = [name for name in RUN_FIELDS if name not in record["run"]]
        assert not missing_run, (record["id"], missing_run)
        assert record["run"].get("model") or record["run"].get("model_shape"), record["id"]


def test_quoted_figure_is_the_measured_one():
    """The figure in GiB is a number in the quote: as printed (GiB), MiB / 1024 or bytes / 2^30
    (to the 6 decimals kept), or a quoted percentage of the capacity the source converts it
    against."""
    for record in load_records():
        quoted, gib = record["quoted"], record["measured_gib"]
        if record["measures"] == OUT_OF_MEMORY:
            assert gib is None and "OOM" in quoted, record["id"]
            continue
        if "measured_from_percent" in record:
            percent, of_gib = record["measured_from_percent"]["percent"], record["measured_from_percent"]["of_gib"]
            assert f"{percent:.2f}%" in quoted, (record["id"], quoted, percent)
            assert math.isclose(gib, percent / 100 * of_gib, abs_tol=1e-4), record["id"]
            continue
        numbers = [float(word) for word in re.findall(r"\d+(?:\.\d+)?", quoted)]
        as_gib = any(math.isclose(gib, n, abs_tol=1e-9) for n in numbers)
        from_mib = any(math.isclose(gib, n / 1024, abs_tol=1e-6) for n in numbers)
        from_bytes = any(math.isclose(gib, n / 2**30, abs_tol=1e-6) for n in numbers if n > 2**30)
        assert as_gib or from_mib or from_bytes, (record["id"], quoted, gib)


def test_every_expressible_record_has_a_finite_prediction(results):
    records = {record["id"]: record for record in load_records()}
    for result in results:
        if not_expressible(records[result.record_id]):
            assert result.predicted_gib is None and result.skipped, result.record_id
        elif result.measures == OUT_OF_MEMORY:  # compared by its whole peak, not a figure
            assert not result.skipped and result.predicted_gib is None and result.error is None, result.record_id
            assert result.peak_gib is not None and math.isfinite(result.peak_gib) and result.peak_gib > 0, result.record_id
            assert math.isclose(sum(result.breakdown_gib.values()), result.peak_gib, rel_tol=1e-9)
        else:
            assert not result.skipped, (result.record_id, result.skipped)
            assert result.predicted_gib is not None and math.isfinite(result.predicted_gib), result.record_id
            assert result.predicted_gib > 0, result.record_id
            assert math.isclose(sum(result.breakdown_gib.values()), result.peak_gib, rel_tol=1e-9)
            assert result.predicted_gib <= result.peak_gib + result.step_segment_gib + 1e-9
            if result.measures in ("max_allocated", "max_active"):
                assert result.predicted_gib <= result.peak_gib
    assert sum(result.predicted_gib is not None for result in results) >= 10


def test_result_does_not_degrade(results):
    summary = summarize(results)
    assert summary.within_target >= WITHIN_TARGET_FLOOR, summary
    assert summary.mape <= MAPE_CEILING, summary
    assert WITHIN_TARGET == 0.10


# Runs that ran out of memory which the planner still calls feasible: a to-do list that may only
# shrink. BigScience's 206B (hidden 14336, 82 layers, 128 heads) at dp 8 / tp 4 / pp 12 / micro-batch 2
# stopped with OOM on 02-28, while the planner predicts 60.7 GiB, as much as for the 203B beside it
# (hidden 13312, 94 layers), which ran at 67GB; nothing found here tells the two apart.
KNOWN_FALSE_FITS = {"bloom-prequel-0228-206B-h128-dp8-tp4-pp12-mbs2-oom"}


def test_runs_that_ran_out_of_memory_are_said_not_to_fit(results):
    """Issue 13: a plan that would run out of memory must not be called feasible. BigScience's 02-25
    and 02-28 benchmarks list six splits that stopped with OOM on 80 GB A100s (chronicles-prequel.md):
    every one but the known miss is said not to fit."""
    ran_out = [r for r in results if r.measures == OUT_OF_MEMORY]
    assert len(ran_out) >= 6
    false_fits = {r.record_id for r in ran_out if r.fits is not False}
    assert false_fits <= KNOWN_FALSE_FITS, false_fits - KNOWN_FALSE_FITS
    summary = summarize(results)
    assert summary.out_of_memory == len(ran_out) and summary.false_fit == len(false_fits)
    assert summary.false_out_of_memory == 0  # and none of the runs that ran is said not to fit


def test_report_lists_every_record(results):
    text = "\n".join(report_lines(results))
    for result in results:
        assert result.record_id in text
    assert "not expressible" in text


def test_each_figure_is_compared_with_the_quantity_it_counts():
    """Allocated and active peaks are tensors only; reserved adds the allocator's fragmentation
    but not the CUDA context and NCCL buffers outside it; device-used is everything."""
    from bench.memory import predicted_measure_bytes
    from solver.cost.memory import RUNTIME_RESERVE_BYTES

    memory = {"weights": 10.0, "gradients": 5.0, "activations": 20.0, "reserve": RUNTIME_RESERVE_BYTES + 3.0}
    assert predicted_measure_bytes(memory, "max_allocated") == predicted_measure_bytes(memory, "max_active") == 35.0
    assert predicted_measure_bytes(memory, "max_reserved") == 38.0
    assert predicted_measure_bytes(memory, "nvidia_smi_used") == 38.0 + RUNTIME_RESERVE_BYTES
    # The optimizer step's own segments are reserved memory, never allocated at the peak; and no
    # reserve exceeds the GPU (the allocator frees its cache and retries first).
    assert predicted_measure_bytes(memory, "max_allocated", 4.0) == 35.0
    assert predicted_measure_bytes(memory, "max_reserved", 4.0) == 42.0
    assert predicted_measure_bytes(memory, "nvidia_smi_used", 4.0) == 42.0 + RUNTIME_RESERVE_BYTES
    assert predicted_measure_bytes(memory, "nvidia_smi_used", 4.0, 40.0 + RUNTIME_RESERVE_BYTES) == 40.0 + RUNTIME_RESERVE_BYTES
    assert predicted_measure_bytes(memory, "max_reserved", 4.0, 40.0 + RUNTIME_RESERVE_BYTES) == 40.0
