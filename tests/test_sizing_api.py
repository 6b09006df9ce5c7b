"""/v1/sizing end to end on SQLite and Postgres: a budget buys a compute-optimal model whose plan
is stored and spends the budget; a model gets its compute-optimal tokens; bad input is a 422."""

from __future__ import annotations

import pytest

from conftest import assert_problem, error_fields

SECONDS_PER_HOUR = 3600.0
BUDGET = {
    "family": "gpt3-1.3b",
    "cluster": "dgx-a100-80gb",
    "num_gpus": 8,
    "training": {"global_batch_size": 256, "seq_length": 2048},
    "budget": {"usd": 1000.0},
}
A100_PRICE_USD = 5.12  # dgx-a100-80gb-x1, the first catalog cluster of the node type


def test_a_money_budget_buys_a_model_whose_stored_plan_spends_it(api):
    response = api.post("/v1/sizing", json=BUDGET)
    assert response.status_code == 201, response.text
    sizing = response.json()
    assert response.headers["location"] == f"/v1/plans/{sizing['plan_id']}"
    assert sizing["mode"] == "budget" and sizing["status"] == "succeeded" and sizing["within_budget"] is True
    assert sizing["gpu_hour_price_usd"] == A100_PRICE_USD
    assert sizing["budget_gpu_hours"] == pytest.approx(1000.0 / A100_PRICE_USD)
    assert sizing["cost_usd"] == pytest.approx(1000.0, rel=1e-6) and sizing["cost_usd"] <= 1000.0
    model = sizing["model"]
    assert model["hidden_size"] == 128 * model["num_attention_heads"] and model["mlp_activation"] == "gelu"
    assert sizing["tokens"] / model["parameters"] == pytest.approx(20.0, rel=0.1)
    assert sizing["compute_flops"] == pytest.approx(6 * model["parameters"] * sizing["tokens"])
    e, a, b, alpha, beta = 1.69, 406.4, 410.7, 0.34, 0.28  # Hoffmann et al. 2022, Eq. (10)
    assert sizing["predicted_loss"] == pytest.approx(e + a / model["parameters"] ** alpha + b / sizing["tokens"] ** beta)
    plan = api.get(f"/v1/plans/{sizing['plan_id']}").json()
    assert plan["request"]["model"]["num_layers"] == model["num_layers"]
    assert plan["request"]["training"]["train_tokens"] == sizing["tokens"]
    assert plan["best"]["parallel"] == sizing["parallel"]
    assert plan["best"]["prediction"]["time_to_train_s"] == sizing["time_to_train_s"]
    assert sizing["gpu_hours"] == pytest.approx(8 * sizing["time_to_train_s"] / SECONDS_PER_HOUR)


def test_a_model_gets_its_compute_optimal_tokens_and_their_cost(api):
    body = {**BUDGET, "model": "gpt3-1.3b", "gpu_hour_price_usd": 2.0}
    del body["budget"]
    sizing = api.post("/v1/sizing", json=body).json()
    assert sizing["mode"] == "model" and sizing["within_budget"] is None and sizing["budget_gpu_hours"] is None
    assert sizing["model"]["name"] == "gpt3-1.3b" and sizing["model"]["num_layers"] == 24
    assert sizing["tokens"] == 20 * sizing["model"]["parameters"]
    assert sizing["cost_usd"] == pytest.approx(sizing["gpu_hours"] * 2.0)
    assert sizing["note"].startswith("gpt3-1.3b should see ") and "(20.0 per parameter)" in sizing["note"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"model": "gpt3-1.3b"}, "body.budget"),
        ({"budget": {"usd": 10.0, "gpu_hours": 5.0}}, "body.budget"),
        ({"budget": {"usd": 10.0}, "cluster": "hgx-h200"}, "body.budget.usd"),
        ({"training": {"global_batch_size": 256, "seq_length": 2048, "train_tokens": 1e9}}, "body.training.train_tokens"),
        ({"family": "gpt3-1.3x"}, "body.family"),
        ({"family": "gpt3-1.3b", "model": "gpt3-1.3x", "budget": None}, "body.model"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(api, change, field):
    problem = assert_problem(api.post("/v1/sizing", json={**BUDGET, **change}), 422)
    assert error_fields(problem) == [field]
