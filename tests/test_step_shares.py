"""bench/step_shares.py: the predicted step's parts beside the bench's errors."""

from __future__ import annotations

import math

import pytest

from bench import accuracy, step_shares, vtrain
from solver.cost.result import BREAKDOWN_KEYS


@pytest.fixture(scope="module")
def results() -> list[accuracy.RunResult]:
    return accuracy.evaluate_bench()


@pytest.fixture(scope="module")
def runs(results) -> list[step_shares.RunShares]:
    return step_shares.run_shares(results)


def test_every_predicted_run_is_split_and_its_parts_add_up_to_its_step(results, runs):
    assert len(runs) == sum(1 for r in results if r.error is not None)
    for run in runs:
        assert set(run.shares) == set(BREAKDOWN_KEYS)
        assert min(run.shares.values()) >= 0.0
        assert sum(run.shares.values()) == pytest.approx(1.0, rel=1e-9), run.run_id


def test_the_evaluation_kept_is_the_one_the_prediction_came_from(results):
    """The step time kept with a vTrain row is its predicted iteration time."""
    rows = [r for r in results if r.family == "vtrain" and r.error is not None]
    assert rows
    for result in rows:
        assert result.metric == "iteration_time_s"
        assert result.evaluation.prediction.step_time_s == pytest.approx(result.predicted)


def test_family_means_and_errors(runs):
    means = step_shares.family_means(runs)
    count, signed, shares = means["llmfoundry-1node"]
    members = [r for r in runs if r.family == "llmfoundry-1node"]
    assert count == len(members) == 145
    assert signed == pytest.approx(sum(r.error for r in members) / count)
    # One node, no pipeline and no tensor parallelism: no TP traffic and no bubble.
    assert shares["tp_comm_s"] == 0.0 and shares["bubble_s"] == 0.0
    assert sum(shares.values()) == pytest.approx(1.0)


def test_pearson():
    assert vtrain.pearson_r([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert vtrain.pearson_r([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert vtrain.pearson_r([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert math.isnan(vtrain.pearson_r([1, 1, 1], [1, 2, 3]))
    assert math.isnan(vtrain.pearson_r([1], [1]))
    # Spearman's rho is Pearson's correlation of the ranks.
    assert vtrain.spearman_rho([1, 5, 2, 9], [10, 30, 20, 40]) == pytest.approx(vtrain.pearson_r([1, 3, 2, 4], [1, 3, 2, 4]))


def test_cli_prints_the_families_asked_for_and_rejects_unknown_ones(capsys):
    assert step_shares.main(["nemo2407", "vtrain"]) == 0
    out = capsys.readouterr().out
    lines = [line.split()[0] for line in out.splitlines() if line[:1].isalpha()]
    assert "nemo2407" in lines and "vtrain" in lines and "bloom" not in lines
    assert "correlation of each part's share with the signed error over 54 runs" in out
    with pytest.raises(SystemExit) as exit_info:
        step_shares.main(["no-such-family"])
    assert exit_info.value.code == 2
    assert "no-such-family" in capsys.readouterr().err
