"""bench/microbatch_split.py: the split of a step into a fixed cost per micro-batch and a cost per
sample, from runs that differ only in micro-batch size."""

from __future__ import annotations

import pytest

from bench import accuracy
from bench.microbatch_split import critical_micro_batches, fit_split, splits


def test_critical_path_counts_the_micro_batches_and_the_bubble():
    # 256 samples over dp 4 in micro-batches of 4: 16 micro-batches, plus pp 8 - 1 in the bubble.
    assert critical_micro_batches(256, 4, 4, 8) == 23
    # Interleaved with 2 chunks per stage: the bubble is (pp - 1) / v micro-batches.
    assert critical_micro_batches(256, 4, 4, 8, virtual_stages=2) == pytest.approx(16 + 3.5)


def test_two_sizes_give_the_split_exactly_and_more_sizes_fit_it():
    fixed_s, per_sample_s = 0.05, 0.02
    sizes = [1, 2, 4, 8]
    passes = [critical_micro_batches(512, b, 8, 4) for b in sizes]
    steps = [n * (fixed_s + per_sample_s * b) for n, b in zip(passes, sizes)]
    assert fit_split(sizes[:2], passes[:2], steps[:2]) == pytest.approx((fixed_s, per_sample_s))
    assert fit_split(sizes, passes, steps) == pytest.approx((fixed_s, per_sample_s))
    with pytest.raises(ValueError):
        fit_split([4, 4], passes[:2], steps[:2])


def test_aws_deepseek_v3_pair_splits_as_its_published_step_times_say():
    # awslabs/awsome-distributed-ai RESULTS.md: 12.538 s at micro-batch 1 and 9.774 s at 4, global
    # batch 256 on dp 4 and pp 8: 71 and 23 passes, so fixed + b x per-sample = 0.17659 and
    # 0.42496 s, i.e. 93.8 ms fixed and 82.8 ms per sample of 4096 tokens.
    ids = {r["id"] for r in accuracy.load_aws_records() if "deepseek-v3" in r["id"] and "overlap" not in r["id"]}
    records = [r for r in accuracy.load_aws_records() if r["id"] in ids]
    (row,) = splits(records)
    assert sorted(row.micro_batches) == [1, 4]
    assert row.measured_fixed_s == pytest.approx(0.093804, rel=1e-4)
    assert row.measured_per_sample_s == pytest.approx(0.082788, rel=1e-4)
    assert row.predicted_fixed_s > 0 and row.predicted_per_sample_s > 0


def test_the_bench_groups_only_runs_that_differ_in_micro_batch_alone():
    rows = splits()
    by_first = {row.run_ids[0]: row for row in rows}
    # vTrain's 175B tp 8 pp 16 dp 4 rows ran micro-batches 2, 3, 4 and 6 (ground_truth_multi.csv).
    vtrain_group = next(row for first, row in by_first.items() if first.startswith("vtrain-") and "175B-tp8-pp16-dp4" in first)
    assert sorted(vtrain_group.micro_batches) == [2, 3, 4, 6]
    # The AWS overlap runs change recomputation and the pipeline schedule too: never grouped with
    # the overlap-off pairs.
    for row in rows:
        overlap = {"overlap" in run_id for run_id in row.run_ids}
        assert len(overlap) == 1, row.run_ids
        assert len(set(row.micro_batches)) >= 2
