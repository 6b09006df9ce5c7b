"""POST /v1/plans naming several clusters (issue 15 part 5) through HTTP on SQLite and Postgres:
min_cost and min_time_to_train choose among them and the plan compares them side by side."""

from __future__ import annotations

import html
import io
import json

import pytest

from app import cli
from app.plans import answer
from app.plans.schemas import PlanRequest
from conftest import assert_problem, error_fields

CLUSTERS = ["dgx-a100-80gb-x1", "dgx-h100-x1"]


def multi_body(**overrides) -> dict:
    body = {
        "model": "gpt3-1.3b",
        "cluster": CLUSTERS,
        "training": {"global_batch_size": 512, "seq_length": 2048, "train_tokens": 2.6e10},
        "objective": "min_cost",
        "top_k": 2,
    }
    body.update(overrides)
    return body


def single(api, cluster: str, objective: str) -> dict:
    body = multi_body(cluster=cluster, objective=objective)
    response = api.post("/v1/plans", json=body)
    assert response.status_code in (200, 201), response.text
    return response.json()


@pytest.mark.parametrize("objective", ["min_cost", "min_time_to_train"])
def test_chooses_among_clusters_and_compares_them(api, objective):
    created = api.post("/v1/plans", json=multi_body(objective=objective))
    assert created.status_code == 201, created.text
    plan = created.json()
    comparison = plan["cluster_comparison"]
    assert comparison["objective"] == objective
    rows = {row["cluster"]: row for row in comparison["clusters"]}
    assert list(rows) == CLUSTERS
    # Each row is what planning on that cluster alone finds.
    for name in CLUSTERS:
        alone = single(api, name, objective)
        row = rows[name]
        assert row["status"] == "succeeded"
        assert row["objective_value"] == pytest.approx(alone["best"]["objective_value"], rel=1e-12)
        assert row["step_time_s"] == pytest.approx(alone["best"]["prediction"]["step_time_s"], rel=1e-12)
        assert row["time_to_train_s"] == pytest.approx(alone["best"]["prediction"]["time_to_train_s"], rel=1e-12)
        price = {"dgx-a100-80gb-x1": 5.12, "dgx-h100-x1": 12.29}[name]  # the catalog's list prices
        assert row["gpu_hour_price_usd"] == price
        assert row["cost_usd"] == pytest.approx(row["time_to_train_s"] * row["num_gpus"] * price / 3600, rel=1e-12)
    key = "cost_usd" if objective == "min_cost" else "time_to_train_s"
    winner = min(CLUSTERS, key=lambda name: rows[name][key])
    assert comparison["chosen_cluster"] == winner
    assert comparison["reason"].startswith(winner)
    # The plan is the winner's: candidates, snapshot and listing.
    assert plan["best"]["objective_value"] == pytest.approx(rows[winner]["objective_value"], rel=1e-12)
    assert plan["catalog_snapshot"]["cluster"]["entry"]["name"] == winner
    assert plan["request"]["cluster"] == CLUSTERS
    again = api.post("/v1/plans", json=multi_body(objective=objective))
    assert again.status_code == 200 and again.json()["id"] == plan["id"]
    assert api.get(f"/v1/plans/{plan['id']}").json()["cluster_comparison"] == comparison
    page = api.get(f"/plans/{plan['id']}")
    assert page.status_code == 200 and " or ".join(CLUSTERS) in page.text
    # The page compares the clusters as the JSON does: a row each, the winner marked.
    assert "<h2>Clusters compared</h2>" in page.text and html.escape(comparison["reason"]) in page.text
    assert page.text.count('<tr class="cluster"') == len(CLUSTERS)
    assert f'<tr class="cluster" aria-current="true"><td>{winner} (chosen)</td>' in page.text


def test_a_request_price_applies_to_every_cluster(api):
    plan = api.post("/v1/plans", json=multi_body(gpu_hour_price_usd=2.0)).json()
    rows = plan["cluster_comparison"]["clusters"]
    assert {row["gpu_hour_price_usd"] for row in rows} == {2.0}
    # At one price the cheaper cluster is the faster one.
    assert plan["cluster_comparison"]["chosen_cluster"] == min(rows, key=lambda r: r["time_to_train_s"])["cluster"]


def test_several_clusters_with_critical_batch(api):
    body = multi_body(
        training={"global_batch_size": 512, "seq_length": 2048},
        critical_batch={"min_tokens": 2.6e10, "noise_scale_tokens": 2e6, "global_batch_size": {"min": 128, "max": 1024}},
        objective="min_time_to_train",
    )
    created = api.post("/v1/plans", json=body)
    assert created.status_code == 201, created.text
    plan = created.json()
    winner = plan["cluster_comparison"]["chosen_cluster"]
    row = next(r for r in plan["cluster_comparison"]["clusters"] if r["cluster"] == winner)
    assert row["global_batch_size"] == plan["batch_choice"]["chosen_global_batch_size"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"cluster": ["dgx-a100-80gb-x1", "no-such-cluster"]}, "body.cluster.1"),
        ({"cluster": ["no-such-cluster", "dgx-h100-x1"]}, "body.cluster.0"),
        ({"cluster": ["dgx-h100-x1", "dgx-h100-x1"]}, "body.cluster"),
        ({"cluster": ["dgx-h100-x1"]}, "body.cluster"),
        ({"num_gpus": 16}, "body.num_gpus"),
        ({"profile_id": "anything"}, "body.profile_id"),
    ],
)
def test_bad_cluster_lists_are_a_422_naming_the_field(api, overrides, field):
    problem = assert_problem(api.post("/v1/plans", json=multi_body(**overrides)), 422)
    assert any(f == field or f.startswith(field + ".") for f in error_fields(problem)), problem


def test_cli_plans_on_several_clusters_and_names_an_unknown_one():
    def run(body: dict) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = cli.main(["plan", "-"], env={}, out=out, err=err, stdin=io.StringIO(json.dumps(body)))
        return code, out.getvalue(), err.getvalue()

    code, out, err = run(multi_body())
    assert code == 0, err
    plan = json.loads(out)
    rows = plan["cluster_comparison"]["clusters"]
    assert [row["cluster"] for row in rows] == CLUSTERS
    assert plan["cluster_comparison"]["chosen_cluster"] == min(rows, key=lambda r: r["cost_usd"])["cluster"]
    code, _, err = run(multi_body(cluster=["dgx-h100-x1", "no-such-cluster"]))
    assert code == 2
    assert json.loads(err)["errors"][0]["field"] == "body.cluster.1"


def test_a_single_cluster_request_normalises_as_before():
    """The stored request (and so the request hash) of a one-cluster request without
    critical_batch has exactly the keys it had before either existed (checked by hand: the hash
    of such a request is the same at ba2b557 and 8b316d4)."""
    body = multi_body(cluster="dgx-a100-80gb-x1")
    request = answer.normalise(PlanRequest.model_validate(body), 30.0, 8)
    assert sorted(request) == ["cluster", "constraints", "model", "num_gpus", "objective", "time_budget_s", "top_k", "training"]
    assert request["cluster"] == "dgx-a100-80gb-x1" and request["num_gpus"] == 8
    several = answer.normalise(PlanRequest.model_validate(multi_body()), 30.0, None)
    assert several["cluster"] == CLUSTERS and "num_gpus" not in several
