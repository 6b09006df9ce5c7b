"""POST /v1/plans with critical_batch (issue 15 part 3) through HTTP on SQLite and Postgres: the
planner chooses the global batch size and explains the time it takes."""

from __future__ import annotations

import html
import io
import json

import pytest

from app import cli
from conftest import assert_problem, error_fields


def batch_body(**overrides) -> dict:
    body = {
        "model": "gpt3-1.3b",
        "cluster": "dgx-a100-80gb-x128",
        "training": {"global_batch_size": 512, "seq_length": 2048},
        "critical_batch": {"min_tokens": 2.6e10, "target_loss": 2.5},
        "objective": "min_time_to_train",
        "top_k": 2,
    }
    body.update(overrides)
    return body


def test_chooses_the_batch_that_trains_fastest_and_explains_the_time(api):
    created = api.post("/v1/plans", json=batch_body())
    assert created.status_code == 201, created.text
    plan = created.json()
    choice = plan["batch_choice"]
    assert choice["noise_scale_source"] == "kaplan2020"
    assert choice["noise_scale_tokens"] == pytest.approx(2e8 / 2.5 ** (1 / 0.21))
    assert choice["reference_global_batch_size"] == 512
    points = {p["global_batch_size"]: p for p in choice["points"]}
    assert sorted(points) == [64, 128, 256, 512, 1024, 2048, 4096]
    chosen = choice["chosen_global_batch_size"]
    assert chosen == min(points, key=lambda b: points[b]["time_to_train_s"])
    for p in points.values():
        assert p["time_to_train_s"] == pytest.approx(p["steps"] * p["step_time_s"], rel=1e-9)
        assert p["time_to_train_s"] == pytest.approx(p["time_for_min_tokens_s"] + p["time_for_extra_tokens_s"], rel=1e-9)
        assert p["tokens"] == pytest.approx(2.6e10 * (1 + p["tokens_per_step"] / choice["noise_scale_tokens"]))
    # The candidates are the search at the chosen batch, costed for the tokens it needs.
    best = plan["best"]
    assert best["prediction"]["time_to_train_s"] == pytest.approx(points[chosen]["time_to_train_s"], rel=1e-9)
    assert best["objective_value"] == pytest.approx(points[chosen]["time_to_train_s"], rel=1e-9)
    assert str(chosen) in choice["summary"]
    # The stored request is the request as given; a repeat is the stored plan.
    assert plan["request"]["critical_batch"] == {"min_tokens": 2.6e10, "target_loss": 2.5}
    again = api.post("/v1/plans", json=batch_body())
    assert again.status_code == 200 and again.json()["id"] == plan["id"]
    stored = api.get(f"/v1/plans/{plan['id']}").json()
    assert stored["batch_choice"] == choice
    assert "batch_choice" not in stored["search"]
    # The plan page shows the comparison: a row per batch size, the chosen one marked.
    page = api.get(f"/plans/{plan['id']}").text
    assert "<h2>Global batch size</h2>" in page and html.escape(choice["summary"]) in page
    assert page.count('<tr class="batch"') == len(points)
    assert f'<tr class="batch" aria-current="true"><td class="num">{chosen:,} (chosen)</td>' in page
    # The request reads with the batch the candidates run (their timeline is drawn for it).
    assert (f"(the planner chose {chosen})" in page) == (chosen != 512)


def test_min_cost_with_bounds_and_a_given_noise_scale(api):
    body = batch_body(
        objective="min_cost",
        critical_batch={"min_tokens": 2.6e10, "noise_scale_tokens": 2e6, "global_batch_size": {"min": 256, "max": 2048}},
    )
    created = api.post("/v1/plans", json=body)
    assert created.status_code == 201, created.text
    choice = created.json()["batch_choice"]
    assert choice["noise_scale_source"] == "request" and choice["target_loss"] is None
    costs = {p["global_batch_size"]: p["cost_usd"] for p in choice["points"]}
    assert sorted(costs) == [256, 512, 1024, 2048]
    assert choice["chosen_global_batch_size"] == min(costs, key=lambda b: costs[b])


def test_a_plan_without_critical_batch_has_no_batch_choice(api):
    body = batch_body(cluster="dgx-a100-80gb-x1", training={"global_batch_size": 512, "seq_length": 2048, "train_tokens": 1e10})
    del body["critical_batch"]
    created = api.post("/v1/plans", json=body)
    assert created.status_code in (200, 201), created.text
    assert "batch_choice" not in created.json()


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"objective": "max_throughput"}, "body.objective"),
        ({"training": {"global_batch_size": 512, "seq_length": 2048, "train_tokens": 1e10}}, "body.training.train_tokens"),
        ({"critical_batch": {"min_tokens": 2.6e10}}, "body.critical_batch"),
        ({"critical_batch": {"min_tokens": 2.6e10, "target_loss": 0.01}}, "body.critical_batch.target_loss"),
        ({"critical_batch": {"min_tokens": 2.6e10, "target_loss": 2.5, "global_batch_size": {"min": 1, "max": 1 << 20}}},
         "body.critical_batch.global_batch_size"),
    ],
)
def test_misuse_is_a_422_naming_the_field(api, overrides, field):
    problem = assert_problem(api.post("/v1/plans", json=batch_body(**overrides)), 422)
    assert field in error_fields(problem)


def test_the_export_runs_the_chosen_batch(api):
    plan = api.post("/v1/plans", json=batch_body()).json()
    chosen = plan["batch_choice"]["chosen_global_batch_size"]
    export = api.get(f"/v1/plans/{plan['id']}/export", params={"format": "megatron"})
    assert export.status_code == 200, export.text
    script = next(f["content"] for f in export.json()["files"] if f["name"] == "pretrain_gpt.sh")
    assert f"--global-batch-size {chosen}" in script


def test_cli_chooses_the_batch():
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["plan", "-"], env={}, out=out, err=err, stdin=io.StringIO(json.dumps(batch_body())))
    assert code == 0, err.getvalue()
    choice = json.loads(out.getvalue())["batch_choice"]
    times = {p["global_batch_size"]: p["time_to_train_s"] for p in choice["points"]}
    assert choice["chosen_global_batch_size"] == min(times, key=lambda b: times[b])
