"""The hardware of 2026 through HTTP (issue 16), on SQLite and Postgres: the catalog lists the new
GPUs and systems with their block-scaled peaks and NVLink domains; every new node type works as
a cluster with a GPU count; a precision the GPU lacks is a 422 naming the field."""

from __future__ import annotations

import pytest

from conftest import assert_problem, error_fields, unique_name

NODES = ("hgx-h800", "hgx-h200-nvl", "hgx-b200", "hgx-b300", "gb200-nvl72", "gb300-nvl72", "mi325x-platform", "mi355x-platform")
TRAINING = {"global_batch_size": 512, "seq_length": 2048}


def test_the_catalog_lists_the_new_gpus_with_their_block_scaled_peaks(api):
    gpus = {entry["name"]: entry for entry in api.get("/v1/catalog/gpus").json()["items"]}
    assert {"h800-sxm5-80gb", "b200-sxm-180gb", "b300-sxm-288gb", "gb200-186gb", "gb300-288gb", "mi325x", "mi355x"} <= set(gpus)
    assert gpus["b200-sxm-180gb"]["peak_tflops"] == {"fp16": 2250.0, "bf16": 2250.0, "fp8": 4500.0, "mxfp8": 4500.0, "nvfp4": 9000.0}
    assert gpus["gb300-288gb"]["peak_tflops"]["nvfp4"] == 15000.0
    assert "nvfp4" not in gpus["h100-sxm5-80gb"]["peak_tflops"]
    assert "Maximum Achievable Matmul" in gpus["b200-sxm-180gb"]["sources"]["gemm_efficiency"]


def test_the_catalog_shows_a_racks_nvlink_domain(api):
    rack = api.get("/v1/catalog/clusters/gb200-nvl72-x1").json()
    assert (rack["gpu"], rack["gpus_per_node"], rack["num_nodes"], rack["nvlink_domain_gpus"]) == ("gb200-186gb", 4, 18, 72)
    assert "nvlink_domain_gpus" in rack["link_sources"]
    names = {entry["name"] for entry in api.get("/v1/catalog/clusters").json()["items"]}
    assert {"hgx-h800-x256", "hgx-b200-x8", "gb200-nvl72-x8", "gb300-nvl72-x8", "mi355x-x8"} <= names


@pytest.mark.parametrize("node", NODES)
def test_every_new_node_type_is_a_cluster_for_an_evaluation(api, node):
    body = {"model": "gpt3-1.3b", "cluster": node, "training": TRAINING,
            "parallel": {"dp_size": 4, "tp_size": 2, "pp_size": 1, "micro_batch_size": 4}}
    response = api.post("/v1/evaluations", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["feasible"] is True


def test_256_gpus_of_gb200_nvl72_plan_on_four_racks(api):
    body = {"model": "gpt3-1.3b", "cluster": "gb200-nvl72", "num_gpus": 256, "training": TRAINING, "top_k": 1,
            "constraints": {"pp_size": 1, "zero_stage": 1}}
    response = api.post("/v1/plans", json=body)
    assert response.status_code in (200, 201), response.text
    plan = response.json()
    assert plan["status"] == "succeeded"
    entry = plan["catalog_snapshot"]["cluster"]["entry"]
    # Whole racks: 256 GPUs need 4 NVL72 racks (72 trays of 4); the plan uses 256 of their 288.
    assert (entry["node"], entry["gpus_per_node"], entry["nvlink_domain_gpus"], entry["num_nodes"]) == ("gb200-nvl72", 4, 72, 72)
    parallel = plan["best"]["parallel"]
    assert parallel["dp_size"] * parallel["tp_size"] * parallel["pp_size"] * parallel.get("cp_size", 1) == 256


def test_nvfp4_on_an_h100_is_a_422_naming_the_precision(api):
    body = {"model": "gpt3-1.3b", "cluster": "dgx-h100-x1", "training": {**TRAINING, "precision": "nvfp4"},
            "parallel": {"dp_size": 8, "tp_size": 1, "pp_size": 1, "micro_batch_size": 4}}
    problem = assert_problem(api.post("/v1/evaluations", json=body), 422)
    assert "body.training.precision" in error_fields(problem)
    assert "nvfp4" in problem["detail"]
    plan = {"model": "gpt3-1.3b", "cluster": "dgx-h100-x1", "training": {**TRAINING, "precision": "mxfp8"}, "top_k": 1}
    problem = assert_problem(api.post("/v1/plans", json=plan), 422)
    assert "body.training.precision" in error_fields(problem)


def test_block_scaled_precisions_evaluate_on_blackwell(api):
    times = {}
    for precision in ("fp8", "mxfp8", "nvfp4"):
        body = {"model": "gpt3-1.3b", "cluster": "hgx-b200-x8", "num_gpus": 8, "training": {**TRAINING, "precision": precision},
                "parallel": {"dp_size": 8, "tp_size": 1, "pp_size": 1, "micro_batch_size": 4}}
        response = api.post("/v1/evaluations", json=body)
        assert response.status_code == 200, response.text
        times[precision] = response.json()["prediction"]["step_time_s"]
    assert times["nvfp4"] < times["fp8"] < times["mxfp8"]


def test_an_inline_cluster_with_a_domain_that_does_not_tile_its_nodes_is_a_422(api):
    cluster = {"name": "odd-rack", "gpu": "gb200-186gb", "gpus_per_node": 4, "num_nodes": 18, "nvlink_domain_gpus": 6,
               "intra_node_gbytes_per_s": 900.0, "inter_node_gbytes_per_s": 50.0}
    body = {"model": "gpt3-1.3b", "cluster": cluster, "training": TRAINING,
            "parallel": {"dp_size": 4, "tp_size": 2, "pp_size": 1, "micro_batch_size": 4}}
    problem = assert_problem(api.post("/v1/evaluations", json=body), 422)
    assert "body.cluster.nvlink_domain_gpus" in error_fields(problem)


def test_a_custom_cluster_keeps_its_nvlink_domain(api):
    """A site that keeps 8 of each NVL72 rack's GPUs as spares describes a 64-GPU domain."""
    name = unique_name("nvl64")
    body = {"name": name, "gpu": "gb200-186gb", "gpus_per_node": 4, "num_nodes": 32, "nvlink_domain_gpus": 64,
            "intra_node_gbytes_per_s": 900.0, "inter_node_gbytes_per_s": 50.0}
    created = api.post("/v1/catalog/clusters", json=body)
    assert created.status_code == 201, created.text
    assert api.get(f"/v1/catalog/clusters/{name}").json()["nvlink_domain_gpus"] == 64
    evaluation = {"model": "gpt3-1.3b", "cluster": name, "num_gpus": 128, "training": TRAINING,
                  "parallel": {"dp_size": 8, "tp_size": 16, "pp_size": 1, "micro_batch_size": 1}}
    response = api.post("/v1/evaluations", json=evaluation)
    assert response.status_code == 200, response.text  # tp 16 inside a 64-GPU domain, no placement violation
    assert response.json()["feasible"] is True
    bad = body | {"name": unique_name("nvl-bad"), "nvlink_domain_gpus": 6}
    problem = assert_problem(api.post("/v1/catalog/clusters", json=bad), 422)
    assert "body.nvlink_domain_gpus" in error_fields(problem)
    assert api.delete(f"/v1/catalog/clusters/{name}").status_code == 204
