"""Mixture-of-experts models through HTTP (issue 16): an inline MoE model spec is planned, its
plan's parallel object and constraints carry ep_size, the stored model keeps its MoE fields,
bad MoE fields are a 422 naming the field, and the catalog lists the MoE models."""

from __future__ import annotations

from conftest import error_fields, unique_name

# A small Mixtral-shaped model: 8 experts, top-2, every layer MoE.
SMALL_MOE = {
    "num_layers": 4, "hidden_size": 1024, "num_attention_heads": 16, "num_kv_heads": 4, "ffn_hidden_size": 3584,
    "vocab_size": 32000, "seq_length": 2048, "mlp_activation": "swiglu", "tied_embeddings": False,
    "position_embedding": "none", "num_experts": 8, "experts_per_token": 2,
}


def plan_body(model, **overrides) -> dict:
    body = {
        "model": model,
        "cluster": "dgx-h100",
        "num_gpus": 16,
        "training": {"global_batch_size": 64, "seq_length": 2048, "precision": "bf16"},
        "objective": "max_throughput",
        "constraints": {"ep_size": [8], "tp_size": [1, 2]},
        "top_k": 2,
    }
    body.update(overrides)
    return body


def test_an_inline_moe_model_is_planned_with_expert_parallelism_and_stored_as_given(api):
    model = SMALL_MOE | {"name": unique_name("moe-inline")}
    created = api.post("/v1/plans", json=plan_body(model))
    assert created.status_code == 201, created.text
    plan = created.json()
    assert plan["status"] == "succeeded"
    for candidate in plan["candidates"]:
        assert candidate["parallel"]["ep_size"] == 8
    stored = api.get(f"/v1/plans/{plan['id']}").json()
    assert stored["candidates"] == plan["candidates"]
    assert stored["request"]["model"]["num_experts"] == 8 and stored["request"]["model"]["experts_per_token"] == 2
    assert stored["request"]["constraints"]["ep_size"] == [8]


def test_an_inline_model_with_routing_groups_plans_with_the_flex_dispatcher(api):
    """Group-limited routing (4 groups of 2 experts, top 2 groups) and the flex dispatcher through
    HTTP: both stored as given, the plan succeeds."""
    model = SMALL_MOE | {"name": unique_name("moe-groups"), "router_groups": 4, "router_group_topk": 2}
    body = plan_body(model)
    body["training"] = body["training"] | {"moe_dispatcher": "flex"}
    created = api.post("/v1/plans", json=body)
    assert created.status_code == 201, created.text
    assert created.json()["status"] == "succeeded"
    stored = api.get(f"/v1/plans/{created.json()['id']}").json()
    assert (stored["request"]["model"]["router_groups"], stored["request"]["model"]["router_group_topk"]) == (4, 2)
    assert stored["request"]["training"]["moe_dispatcher"] == "flex"


def test_an_evaluation_of_an_moe_model_takes_ep_size(api):
    body = {
        "model": SMALL_MOE | {"name": unique_name("moe-eval")},
        "cluster": "dgx-h100",
        "training": {"global_batch_size": 64, "seq_length": 2048},
        "parallel": {"dp_size": 8, "tp_size": 1, "pp_size": 1, "ep_size": 8, "zero_stage": 1, "micro_batch_size": 1},
    }
    response = api.post("/v1/evaluations", json=body)
    assert response.status_code == 200, response.text
    replicated = api.post("/v1/evaluations", json=body | {"parallel": body["parallel"] | {"ep_size": 1}})
    assert replicated.status_code == 200, replicated.text
    # Each GPU holds 1 of the 8 experts at ep 8, all 8 at ep 1 (embedding and attention: both).
    assert response.json()["memory"]["breakdown_gib"]["weights"] < replicated.json()["memory"]["breakdown_gib"]["weights"] / 3


def test_ep_size_on_a_dense_model_is_a_422_naming_ep_size(api):
    body = {
        "model": "gpt3-1.3b",
        "cluster": "dgx-a100-80gb-x1",
        "training": {"global_batch_size": 64, "seq_length": 2048},
        "parallel": {"dp_size": 8, "ep_size": 2, "zero_stage": 1, "micro_batch_size": 1},
    }
    response = api.post("/v1/evaluations", json=body)
    assert response.status_code == 422, response.text
    assert "body.parallel.ep_size" in error_fields(response.json())


def test_bad_moe_fields_are_a_422_naming_the_field(api):
    for bad, field in (
        ({"experts_per_token": 9}, "body.model.experts_per_token"),  # more than the 8 experts
        ({"num_experts": -1}, "body.model.num_experts"),
        ({"router": "hash"}, "body.model.router"),
        ({"router_groups": 3, "router_group_topk": 1}, "body.model.router_groups"),  # 8 experts in 3 groups
        ({"router_groups": 4, "router_group_topk": 5}, "body.model.router_group_topk"),  # more than the 4 groups
        ({"router_groups": 4}, "body.model.router_group_topk"),  # groups without the groups a token may use
    ):
        response = api.post("/v1/plans", json=plan_body(SMALL_MOE | {"name": unique_name("moe-bad")} | bad))
        assert response.status_code == 422, response.text
        assert field in error_fields(response.json()), (bad, error_fields(response.json()))


def test_the_catalog_lists_the_moe_models_with_their_fields(api):
    response = api.get("/v1/catalog/models/deepseek-v3")
    assert response.status_code == 200, response.text
    entry = response.json()
    assert (entry["num_experts"], entry["experts_per_token"], entry["first_dense_layers"]) == (256, 8, 3)
    dense = api.get("/v1/catalog/models/gpt3-1.3b").json()
    assert "num_experts" not in dense or dense["num_experts"] in (None, 0)
