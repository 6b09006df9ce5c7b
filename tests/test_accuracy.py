"""The cost model against the published measured runs (bench/accuracy.py), deterministically.

The issue's target is MAPE <= 10% with no run worse than 20%. The model meets it on the
controlled Megatron-LM benchmarks (Korthikanti et al. 2022: single iterations, no data loading)
but not yet on the end-to-end set, whose runs carry framework and data-pipeline overheads the
analytic model does not see; these bounds hold today's accuracy so a change cannot degrade it,
and they are to be tightened, never loosened.
"""

from __future__ import annotations

import pytest

from bench.accuracy import evaluate_all, summary


@pytest.fixture(scope="module")
def results():
    return evaluate_all()


def test_every_record_with_a_model_shape_is_evaluated(results):
    evaluated = [r for r in results if r.error is not None]
    skipped = {r.run_id: r.skipped for r in results if r.skipped}
    assert len(evaluated) == 20
    assert set(skipped) == {"zero2019-zero100b-400v100", "nemo2407-GPT3-5B-64gpu"}
    assert all(r.predicted > 0 and "INFEASIBLE" not in r.filled for r in evaluated)


def test_controlled_benchmarks_within_10_percent(results):
    for r in results:
        if r.run_id.startswith("korthikanti2022"):
            assert abs(r.error) <= 0.10, (r.run_id, r.error)


def test_megatron_runs_within_20_percent(results):
    for r in results:
        if r.run_id.startswith("megatron2021") or r.run_id.startswith("korthikanti2022"):
            assert abs(r.error) <= 0.20, (r.run_id, r.error)


def test_public_set_mape_does_not_degrade(results):
    mape, worst, count = summary(results)
    assert count == 20
    assert mape <= 0.135
    assert worst <= 0.30
