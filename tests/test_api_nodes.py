"""Node types are discoverable: ``GET /v1/catalog/nodes`` lists what a request may name as its
cluster with a GPU count (AWS's instance types among them), each with its links and sources; an
unknown node type is a 404 with close names, a mistyped cluster suggests node types too, and the
CLI lists them without a server."""

from __future__ import annotations

import json

from test_cli import run

import catalog
from conftest import assert_problem, error_fields


def test_the_api_lists_every_node_type_with_its_sources(api):
    response = api.get("/v1/catalog/nodes")
    assert response.status_code == 200, response.text
    items = {entry["name"]: entry for entry in response.json()["items"]}
    assert set(items) == {node["name"] for node in catalog.list_entries("nodes")}
    p5 = items["p5.48xlarge"]
    assert (p5["gpu"], p5["gpus_per_node"], p5["inter_node_gbytes_per_s"], p5["ring_nic_aggregation"], p5["builtin"]) == (
        "h100-sxm5-80gb", 8, 50.0, True, True)
    assert "all_reduce_perf" in p5["sources"]["ring_nic_aggregation"]
    assert items["gb200-nvl72"]["nvlink_domain_gpus"] == 72
    assert "ring_nic_aggregation" not in items["dgx-h100"]  # the default (one NIC's share) is not stated
    one = api.get("/v1/catalog/nodes/dgx2h-v100")
    assert one.status_code == 200 and one.json()["gpu"] == "v100-sxm3-32gb-h"


def test_an_unknown_node_type_is_a_404_with_close_names(api):
    problem = assert_problem(api.get("/v1/catalog/nodes/p5.48xl"), 404)
    assert "p5.48xlarge" in problem["suggestions"]


def test_a_mistyped_cluster_suggests_node_types(api):
    body = {"model": "gpt3-1.3b", "cluster": "p5-48xlarge", "num_gpus": 16,
            "training": {"global_batch_size": 256, "seq_length": 2048}, "parallel": {"dp_size": 16}}
    problem = assert_problem(api.post("/v1/evaluations", json=body), 422)
    assert "body.cluster" in error_fields(problem)
    assert "p5.48xlarge" in problem["detail"]


def test_the_cli_lists_and_shows_node_types():
    code, out, _ = run(["catalog", "nodes"])
    assert code == 0
    assert "p6-b300.48xlarge" in {entry["name"] for entry in json.loads(out)["items"]}
    code, out, _ = run(["catalog", "nodes", "p6-b300.48xlarge"])
    assert code == 0 and json.loads(out)["inter_node_gbytes_per_s"] == 100.0
