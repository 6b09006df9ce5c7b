"""Offload to NVMe through the API (issue 16): the NVMe facts of an inline cluster and of the
catalog's DGX-2, the parallel object's nvme_offload, the NVMe an evaluation reports, a plan that
keeps its states on NVMe where host memory is too small, and its ds_config export."""

from __future__ import annotations

import json

import pytest

from conftest import assert_problem, error_fields

TRAINING = {"global_batch_size": 32, "seq_length": 1024, "precision": "fp16"}
# A DGX-2 as an inline cluster: its catalog facts, a write bandwidth no source states (assumed),
# and, for the plan below, 64 GiB of host memory: too little for 13B's offloaded states (208 GB).
DGX2_FACTS = {
    "name": "my-dgx2", "gpu": "v100-sxm2-32gb", "gpus_per_node": 16, "num_nodes": 1,
    "intra_node_gbytes_per_s": 150.0, "inter_node_gbytes_per_s": 6.25,
    "host_memory_gib": 1536, "pcie_gbytes_per_s": 16.0, "host_memory_gbytes_per_s": 256.0,
    "nvme_gbytes": 30000, "nvme_read_gbytes_per_s": 28.0, "nvme_write_gbytes_per_s": 20.0,
}
NVME = {"dp_size": 1, "tp_size": 1, "pp_size": 1, "zero_stage": 3, "micro_batch_size": 1, "recompute": "full",
        "offload": "optimizer+params", "nvme_offload": "optimizer"}


@pytest.mark.parametrize(("field", "value"), [
    ("nvme_read_gbytes_per_s", 0.0), ("nvme_write_gbytes_per_s", -1.0), ("nvme_gbytes", 1e12), ("nvme_gbytes", "lots"),
])
def test_bad_nvme_facts_are_a_422_naming_the_field(api, field, value):
    body = {"model": "gpt3-1.3b", "cluster": {**DGX2_FACTS, field: value}, "num_gpus": 1, "training": TRAINING, "parallel": NVME}
    problem = assert_problem(api.post("/v1/evaluations", json=body), 422)
    assert any(field in name for name in error_fields(problem)), problem


def test_nvme_offload_on_a_cluster_without_its_nvme_facts_is_a_422_naming_nvme_offload(api):
    # The catalog's DGX-2 states its NVMe capacity and read bandwidth, not its write bandwidth.
    body = {"model": "gpt3-13b", "cluster": "dgx2-v100", "num_gpus": 1, "training": TRAINING, "parallel": NVME}
    problem = assert_problem(api.post("/v1/evaluations", json=body), 422)
    assert "parallel.nvme_offload" in json.dumps(problem) and "nvme_write_gbytes_per_s" in json.dumps(problem)
    bad = assert_problem(api.post("/v1/evaluations", json={**body, "parallel": {**NVME, "nvme_offload": "activations"}}), 422)
    assert any("nvme_offload" in name for name in error_fields(bad))


def test_an_evaluation_on_nvme_reports_the_nvme_it_takes(api):
    body = {"model": "gpt3-13b", "cluster": DGX2_FACTS, "num_gpus": 1, "training": TRAINING, "parallel": NVME}
    response = api.post("/v1/evaluations", json=body)
    assert response.status_code == 200, response.text
    memory = response.json()["memory"]
    # 16 bytes per parameter (12.9B): about 206 GB on NVMe; the host keeps the 16-bit parameters
    # (26 GB) and the optimizer swapper's 1.6 GB of buffers.
    assert 200 < memory["nvme_gbytes_per_node"] < 212
    assert 24 < memory["host_gib_per_node"] < 27
    host = api.post("/v1/evaluations", json={**body, "parallel": {**NVME, "nvme_offload": "none"}}).json()["memory"]
    assert host["nvme_gbytes_per_node"] == 0 and host["host_gib_per_node"] > 200


def test_the_catalog_shows_the_dgx2s_nvme_facts_with_sources(api):
    response = api.get("/v1/catalog/clusters/dgx2-v100-x25")
    assert response.status_code == 200, response.text
    cluster = response.json()
    assert (cluster["nvme_gbytes"], cluster["nvme_read_gbytes_per_s"]) == (30000, 28.0)
    assert "nvme_write_gbytes_per_s" not in cluster
    assert {"nvme_gbytes", "nvme_read_gbytes_per_s"} <= set(cluster["link_sources"])


def test_a_plan_keeps_its_states_on_nvme_where_host_memory_is_too_small_and_exports_it(api):
    cluster = {**DGX2_FACTS, "name": "small-host-dgx2", "host_memory_gib": 64}
    body = {"model": "gpt3-13b", "cluster": cluster, "num_gpus": 1, "training": TRAINING, "top_k": 1}
    response = api.post("/v1/plans", json=body)
    assert response.status_code in (200, 201), response.text
    plan = response.json()
    assert plan["status"] == "succeeded"
    best = plan["best"]
    assert best["parallel"]["nvme_offload"] != "none" and best["memory"]["nvme_gbytes_per_node"] > 200
    assert best["memory"]["host_gib_per_node"] <= 64
    export = api.get(f"/v1/plans/{plan['id']}/export", params={"format": "deepspeed"})
    assert export.status_code == 200, export.text
    document = export.json()
    assert document["exact"] is True
    assert any("nvme_path" in note for note in document["notes"])
    zero = json.loads(next(f["content"] for f in document["files"] if f["name"] == "ds_config.json"))["zero_optimization"]
    assert zero["offload_optimizer"]["device"] == "nvme" and zero["offload_optimizer"]["nvme_path"] == "/local_nvme"
    megatron = api.get(f"/v1/plans/{plan['id']}/export", params={"format": "megatron"}).json()
    assert megatron["exact"] is False and any(d["field"] == "parallel.nvme_offload" for d in megatron["differences"])
    page = api.get(f"/plans/{plan['id']}")
    assert page.status_code == 200
    assert f"NVMe {best['parallel']['nvme_offload']}" in page.text and "NVMe per node" in page.text
