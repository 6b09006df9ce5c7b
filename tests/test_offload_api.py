"""Offload through the API (issue 16): the parallel object's offload, the host memory an evaluation
reports, the host facts of the catalog's nodes and of an inline cluster, a plan that offloads where
nothing fits without it, and the ds_config export of that plan."""

from __future__ import annotations

import json

from conftest import assert_problem, error_fields

TRAINING = {"global_batch_size": 32, "seq_length": 1024, "precision": "fp16"}
ZERO_OFFLOAD = {"dp_size": 1, "tp_size": 1, "pp_size": 1, "zero_stage": 2, "micro_batch_size": 1,
                "recompute": "full", "offload": "optimizer"}


def test_an_evaluation_with_offload_reports_host_memory(api):
    body = {"model": "gpt3-13b", "cluster": "dgx2-v100", "num_gpus": 1, "training": TRAINING, "parallel": ZERO_OFFLOAD}
    response = api.post("/v1/evaluations", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["feasible"] is True
    memory = result["memory"]
    assert memory["breakdown_gib"]["optimizer_states"] == 0 and memory["peak_gib"] <= memory["capacity_gib"]
    # 16 bytes per parameter on the host (ZeRO-Offload): about 192 GiB for 12.9B parameters.
    assert 180 < memory["host_gib_per_node"] < 200
    without = api.post("/v1/evaluations", json={**body, "parallel": {**ZERO_OFFLOAD, "offload": "none"}}).json()
    assert without["feasible"] is False and without["memory"]["host_gib_per_node"] == 0


def test_offload_on_a_cluster_without_host_facts_is_a_422_naming_offload(api):
    cluster = {"name": "no-host", "gpu": "v100-sxm2-32gb", "gpus_per_node": 8, "num_nodes": 1,
               "intra_node_gbytes_per_s": 150.0, "inter_node_gbytes_per_s": 6.25}
    body = {"model": "gpt3-1.3b", "cluster": cluster, "num_gpus": 1, "training": TRAINING, "parallel": ZERO_OFFLOAD}
    problem = assert_problem(api.post("/v1/evaluations", json=body), 422)
    assert "body.parallel.offload" in error_fields(problem) or "parallel.offload" in json.dumps(problem)
    # With them given inline, it evaluates.
    facts = {"host_memory_gib": 512, "pcie_gbytes_per_s": 16.0, "host_memory_gbytes_per_s": 136.5}
    response = api.post("/v1/evaluations", json={**body, "cluster": {**cluster, **facts}})
    assert response.status_code == 200, response.text


def test_a_bad_offload_value_is_a_422(api):
    body = {"model": "gpt3-1.3b", "cluster": "dgx2-v100", "num_gpus": 1, "training": TRAINING,
            "parallel": {**ZERO_OFFLOAD, "offload": "nvme"}}
    problem = assert_problem(api.post("/v1/evaluations", json=body), 422)
    assert any("offload" in field for field in error_fields(problem))


def test_the_catalog_shows_host_facts_with_sources(api):
    cluster = api.get("/v1/catalog/clusters/dgx-a100-80gb-x1").json()
    assert (cluster["host_memory_gib"], cluster["pcie_gbytes_per_s"], cluster["host_memory_gbytes_per_s"]) == (2048, 32.0, 409.6)
    assert {"host_memory_gib", "pcie_gbytes_per_s", "host_memory_gbytes_per_s"} <= set(cluster["link_sources"])


def test_a_plan_for_13b_on_one_v100_offloads_and_exports_ds_config(api):
    body = {"model": "gpt3-13b", "cluster": "dgx2-v100", "num_gpus": 1, "training": TRAINING, "top_k": 1}
    response = api.post("/v1/plans", json=body)
    assert response.status_code in (200, 201), response.text
    plan = response.json()
    assert plan["status"] == "succeeded"
    assert plan["best"]["parallel"]["offload"] != "none"
    exported = api.get(f"/v1/plans/{plan['id']}/export", params={"format": "deepspeed", "file": "ds_config.json"})
    assert exported.status_code == 200, exported.text
    zero = json.loads(exported.text)["zero_optimization"]
    assert zero["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    page = api.get(f"/plans/{plan['id']}")
    assert page.status_code == 200
    assert f"offload {plan['best']['parallel']['offload']}" in page.text and "host memory per node" in page.text
