"""Issue 17, "what a new user hits": a node type with a GPU count is how people describe a cluster,
so ``"cluster": "dgx-a100-80gb", "num_gpus": 1024`` plans on 128 such nodes, through HTTP on
SQLite and Postgres."""

from __future__ import annotations

import catalog
from conftest import assert_problem, error_fields

TRAINING = {"global_batch_size": 1536, "seq_length": 2048}


def test_a_node_type_with_a_gpu_count_is_a_cluster_of_that_many_nodes(api):
    body = {"model": "gpt3-175b", "cluster": "dgx-a100-80gb", "num_gpus": 1024, "training": TRAINING, "top_k": 1,
            "constraints": {"tp_size": 8, "zero_stage": 1}}
    response = api.post("/v1/plans", json=body)
    assert response.status_code in (200, 201), response.text
    plan = response.json()
    assert plan["status"] == "succeeded"
    entry = plan["catalog_snapshot"]["cluster"]["entry"]
    assert (entry["node"], entry["num_nodes"], entry["gpus_per_node"]) == ("dgx-a100-80gb", 128, 8)
    parallel = plan["best"]["parallel"]
    assert parallel["dp_size"] * parallel["tp_size"] * parallel["pp_size"] == 1024
    # The same plan as on the catalog's 128-node cluster of that node type, link for link.
    named = catalog.get_entry("clusters", "dgx-a100-80gb-x128")
    for key in ("gpu", "gpus_per_node", "intra_node_gbytes_per_s", "inter_node_gbytes_per_s"):
        assert entry[key] == named[key]


def test_an_evaluation_on_a_node_type_is_sized_to_its_parallel_layout(api):
    body = {"model": "gpt3-1.3b", "cluster": "dgx-h100", "training": {"global_batch_size": 512, "seq_length": 2048},
            "parallel": {"dp_size": 4, "tp_size": 4, "pp_size": 1}}
    response = api.post("/v1/evaluations", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["feasible"] is True


def test_an_unknown_name_is_still_a_422_with_suggestions(api):
    body = {"model": "gpt3-1.3b", "cluster": "dgx-a100-80g", "num_gpus": 16, "training": TRAINING}
    problem = assert_problem(api.post("/v1/plans", json=body), 422)
    assert "body.cluster" in error_fields(problem)
    assert any(s.startswith("dgx-a100-80gb") for s in problem.get("suggestions", []))
