"""/v1/catalog through HTTP, on SQLite and Postgres."""

from __future__ import annotations

from conftest import assert_problem, error_fields, unique_name


def custom_model(name: str) -> dict:
    return {
        "name": name, "num_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "vocab_size": 32000,
        "seq_length": 1024, "mlp_activation": "swiglu", "ffn_hidden_size": 1408, "num_kv_heads": 2,
    }


def test_lists_builtin_gpus_with_their_sourced_values(api):
    response = api.get("/v1/catalog/gpus")
    assert response.status_code == 200
    gpus = {entry["name"]: entry for entry in response.json()["items"]}
    assert {"a100-sxm4-80gb", "h100-sxm5-80gb", "v100-sxm2-32gb"} <= set(gpus)
    assert gpus["a100-sxm4-80gb"]["memory_gib"] == 80.0
    assert gpus["h100-sxm5-80gb"]["peak_tflops"]["bf16"] == 989.4
    assert all(entry["builtin"] for entry in gpus.values())


def test_gets_one_gpu_and_suggests_close_names_for_an_unknown_one(api):
    assert api.get("/v1/catalog/gpus/a100-sxm4-40gb").json()["memory_gib"] == 40.0
    problem = assert_problem(api.get("/v1/catalog/gpus/a100-sxm4-80"), 404)
    assert "a100-sxm4-80gb" in problem["suggestions"]
    assert "a100-sxm4-80" in problem["detail"]


def test_builtin_models_and_clusters(api):
    gpt3 = api.get("/v1/catalog/models/gpt3-175b").json()
    assert (gpt3["num_layers"], gpt3["hidden_size"], gpt3["num_attention_heads"]) == (96, 12288, 96)
    assert gpt3["builtin"] is True and "Brown et al. 2020" in gpt3["source"]
    cluster = api.get("/v1/catalog/clusters/dgx-h100-x8").json()
    assert (cluster["gpu"], cluster["gpus_per_node"], cluster["num_nodes"]) == ("h100-sxm5-80gb", 8, 8)
    names = [entry["name"] for entry in api.get("/v1/catalog/models").json()["items"]]
    assert "llama2-70b" in names and "gpt3-1.3b" in names
    problem = assert_problem(api.get("/v1/catalog/clusters/dgx-h100-x9"), 404)
    assert problem["suggestions"][0].startswith("dgx-h100")


def test_custom_model_lifecycle(api):
    name = unique_name("tiny-llama")
    created = api.post("/v1/catalog/models", json=custom_model(name))
    assert created.status_code == 201, created.text
    assert created.headers["location"] == f"/v1/catalog/models/{name}"
    assert created.json()["builtin"] is False

    fetched = api.get(f"/v1/catalog/models/{name}").json()
    assert (fetched["num_kv_heads"], fetched["ffn_hidden_size"], fetched["mlp_activation"]) == (2, 1408, "swiglu")
    listed = {entry["name"]: entry for entry in api.get("/v1/catalog/models").json()["items"]}
    assert listed[name]["builtin"] is False

    assert_problem(api.post("/v1/catalog/models", json=custom_model(name)), 409)
    assert api.delete(f"/v1/catalog/models/{name}").status_code == 204
    assert_problem(api.get(f"/v1/catalog/models/{name}"), 404)
    assert_problem(api.delete(f"/v1/catalog/models/{name}"), 404)


def test_builtins_are_read_only(api):
    problem = assert_problem(api.delete("/v1/catalog/models/gpt3-175b"), 403)
    assert "built-in" in problem["detail"]
    assert api.get("/v1/catalog/models/gpt3-175b").status_code == 200
    assert_problem(api.post("/v1/catalog/models", json=custom_model("gpt3-175b")), 409)
    assert_problem(api.delete("/v1/catalog/clusters/selene"), 403)


def test_custom_model_errors_name_the_field(api):
    bad = custom_model(unique_name("bad")) | {"hidden_size": 500}
    problem = assert_problem(api.post("/v1/catalog/models", json=bad), 422)
    assert error_fields(problem) == ["body.hidden_size"]
    assert "not divisible by num_attention_heads=8" in problem["errors"][0]["reason"]

    missing = custom_model(unique_name("bad"))
    del missing["vocab_size"]
    problem = assert_problem(api.post("/v1/catalog/models", json=missing), 422)
    assert problem["errors"] == [{"field": "body.vocab_size", "reason": "is required"}]

    problem = assert_problem(api.post("/v1/catalog/models", json=custom_model(unique_name("m")) | {"num_layers": 5000}), 422)
    assert error_fields(problem) == ["body.num_layers"] and "1024" in problem["detail"]

    problem = assert_problem(api.post("/v1/catalog/models", json=custom_model("has spaces")), 422)
    assert error_fields(problem) == ["body.name"]

    problem = assert_problem(api.post("/v1/catalog/models", json=custom_model(unique_name("m")) | {"layers": 3}), 422)
    assert problem["errors"] == [{"field": "body.layers", "reason": "is not a known field"}]


def test_a_squared_relu_model_is_accepted_and_an_unknown_activation_names_the_field(api):
    nemotron = api.get("/v1/catalog/models/nemotron3-8b").json()
    assert (nemotron["mlp_activation"], nemotron["vocab_size"], nemotron["builtin"]) == ("squared_relu", 256000, True)
    assert "nemotron_8b.yaml" in nemotron["source"]

    name = unique_name("tiny-nemotron")
    created = api.post("/v1/catalog/models", json=custom_model(name) | {"mlp_activation": "squared_relu", "ffn_hidden_size": 2048})
    assert created.status_code == 201, created.text
    assert api.get(f"/v1/catalog/models/{name}").json()["mlp_activation"] == "squared_relu"
    assert api.delete(f"/v1/catalog/models/{name}").status_code == 204

    for bad in ("relu2", "squared-relu", "SQUARED_RELU", 2):
        problem = assert_problem(api.post("/v1/catalog/models", json=custom_model(unique_name("m")) | {"mlp_activation": bad}), 422)
        assert error_fields(problem) == ["body.mlp_activation"], bad


def test_a_squared_relu_model_evaluates(api):
    request = {
        "model": "nemotron3-8b", "cluster": "dgx-h100-x8", "num_gpus": 8,
        "training": {"global_batch_size": 32, "seq_length": 4096, "precision": "bf16", "optimizer": "adam"},
        "parallel": {"dp_size": 4, "tp_size": 2, "pp_size": 1, "zero_stage": 1, "micro_batch_size": 1,
                     "recompute": "none", "virtual_stages": 1, "sequence_parallel": True},
    }
    response = api.post("/v1/evaluations", json=request)
    assert response.status_code == 200, response.text
    assert response.json()["feasible"] is True


def test_custom_cluster_with_catalog_gpu_and_with_inline_gpu(api):
    name = unique_name("lab")
    body = {
        "name": name, "gpu": "h100-sxm5-80gb", "gpus_per_node": 4, "num_nodes": 2,
        "intra_node_gbytes_per_s": 450.0, "inter_node_gbytes_per_s": 50.0, "gpu_hour_price_usd": 2.0,
    }
    created = api.post("/v1/catalog/clusters", json=body)
    assert created.status_code == 201, created.text
    assert api.get(f"/v1/catalog/clusters/{name}").json()["num_nodes"] == 2

    inline = body | {
        "name": unique_name("lab-inline"),
        "gpu": {"name": "proto-gpu", "peak_tflops": {"bf16": 500.0}, "memory_gib": 96.0, "hbm_gbytes_per_s": 3000.0},
    }
    created = api.post("/v1/catalog/clusters", json=inline)
    assert created.status_code == 201, created.text
    assert created.json()["gpu"]["memory_gib"] == 96.0
    assert api.delete(f"/v1/catalog/clusters/{name}").status_code == 204


def test_custom_cluster_errors_name_the_field(api):
    body = {
        "name": unique_name("lab"), "gpu": "h100-sxm5", "gpus_per_node": 4, "num_nodes": 2,
        "intra_node_gbytes_per_s": 450.0, "inter_node_gbytes_per_s": 50.0,
    }
    problem = assert_problem(api.post("/v1/catalog/clusters", json=body), 422)
    assert error_fields(problem) == ["body.gpu"]
    assert "h100-sxm5-80gb" in problem["detail"]

    problem = assert_problem(api.post("/v1/catalog/clusters", json=body | {"gpu": "a100-sxm4-80gb", "num_nodes": 0}), 422)
    assert error_fields(problem) == ["body.num_nodes"]

    inline_gpu = {"name": "g", "peak_tflops": {"bf16": -1.0}, "memory_gib": 80.0, "hbm_gbytes_per_s": 2000.0}
    problem = assert_problem(api.post("/v1/catalog/clusters", json=body | {"gpu": inline_gpu}), 422)
    assert error_fields(problem) == ["body.gpu.peak_tflops.bf16"]
