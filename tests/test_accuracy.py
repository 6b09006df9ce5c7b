"""The cost model against the published measured runs (bench/accuracy.py), deterministically.

The issue's target is MAPE <= 10% with no run worse than 20%; both are enforced here.
"""

from __future__ import annotations

import pytest

import catalog
from bench.accuracy import evaluate_all, gpt_neox_2022_flops_per_token, gpt_neox_logged_parameter_count, summary


@pytest.fixture(scope="module")
def results():
    return evaluate_all()


def test_every_record_with_a_model_shape_is_evaluated(results):
    evaluated = [r for r in results if r.error is not None]
    skipped = {r.run_id: r.skipped for r in results if r.skipped}
    assert len(evaluated) == 21
    # The ZeRO paper's record is an average over 8B-100B models with no per-model figure.
    assert set(skipped) == {"zero2019-zero100b-400v100"}
    assert all(r.predicted > 0 and "INFEASIBLE" not in r.filled for r in evaluated)


def test_controlled_benchmarks_within_10_percent(results):
    for r in results:
        if r.run_id.startswith("korthikanti2022"):
            assert abs(r.error) <= 0.10, (r.run_id, r.error)


def test_megatron_runs_within_20_percent(results):
    for r in results:
        if r.run_id.startswith("megatron2021") or r.run_id.startswith("korthikanti2022"):
            assert abs(r.error) <= 0.20, (r.run_id, r.error)


def test_eager_pytorch_runs_within_10_percent(results):
    """DeepLearningExamples BERT runs eager PyTorch kernels (training.fused_kernels false)."""
    bert = [r for r in results if r.run_id.startswith("dle-bert")]
    assert len(bert) == 5
    for r in bert:
        assert abs(r.error) <= 0.10, (r.run_id, r.error)


def test_public_set_mape_within_10_percent(results):
    mape, worst, count = summary(results)
    assert count == 21
    assert mape <= 0.10
    assert worst <= 0.20


def test_gpt_neox_counting_convention_reproduces_its_published_figures():
    """GPT-NeoX-20B's 117 TFLOP/s is in its logger's convention (6 * params + 60 * s * h * L per
    token, params summed over model-parallel ranks). The same count gives the model card's
    parameter figure, and turns 117 TFLOP/s on 96 GPUs into the paper's 1,830 hours for 150,000
    steps of 1,536 x 2,048 tokens (Black et al. 2022 Sec 3)."""
    model = catalog.get_model("gpt-neox-20b")
    assert gpt_neox_logged_parameter_count(model, tp_size=2) == 20_556_201_984
    step_flops = 1536 * 2048 * gpt_neox_2022_flops_per_token(model, 2048, tp_size=2)
    hours = 150_000 * step_flops / (117e12 * 96) / 3600
    assert hours == pytest.approx(1830, rel=0.005)
