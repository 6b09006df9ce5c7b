"""Whether a data-parallel ring crosses the network on every NIC of a node is a measured fact of
the node type (issue 13, mechanism 1): ``ClusterSpec.ring_nic_aggregation``. AWS's p5 and p6
instances have it, from AWS's own nccl-tests over EFA; the default and BigScience's Jean Zay keep
one GPU's share per ring member. Checked against the published bus bandwidths, through the
catalog, the cost model's step and the HTTP API."""

from __future__ import annotations

import dataclasses

import pytest

from catalog import cluster_spec_from_dict, get_cluster, get_entry, get_model, node_cluster_entry
from conftest import assert_problem, error_fields, node_cluster, unique_name
from solver.cost.comm import all_reduce_s, data_parallel_collective_s, group_link, inter_node_link, intra_node_link
from solver.cost.evaluate import evaluate
from solver.spec.errors import SpecError
from solver.spec.parallel import ParallelConfig
from solver.spec.training import TrainingSpec, ZeroStage

GB = 1e9
GIB = 2**30
AWS_NODES = ("p5.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge", "p6-b300.48xlarge")


def _bus_gbytes_per_s(message_bytes: float, ranks: int, seconds: float) -> float:
    """nccl-tests' all-reduce bus bandwidth: algorithm bandwidth x 2 (n - 1) / n."""
    return message_bytes / seconds * 2 * (ranks - 1) / ranks / GB


def test_four_p6_b200_nodes_all_reduce_near_every_nic_not_one_share():
    """awslabs/awsome-distributed-ai at 95b939cd, architectures/aws-pcs/tests/compute-test.md:
    all_reduce_perf over EFA on 4 x p6-b200.48xlarge (32 GPUs, 8 EFAv4 NICs of 400 Gb/s per node)
    reaches 377 GB/s of bus bandwidth at 16 GiB. A ring on every NIC of the node carries
    8 x 50 GB/s x the ring's assumed 0.8 = 320 GB/s; on one GPU's share it would carry 40."""
    cluster = node_cluster("p6-b200.48xlarge", 32)
    assert cluster.ring_nic_aggregation
    message = 16 * GIB
    seconds = data_parallel_collective_s(cluster, 1, 32, message, "all_reduce")
    bus = _bus_gbytes_per_s(message, 32, seconds)
    assert bus == pytest.approx(8 * 50 * 0.8, rel=0.01)
    assert 377 * 0.8 <= bus <= 377
    one_share = dataclasses.replace(cluster, ring_nic_aggregation=False)
    bus_one_share = _bus_gbytes_per_s(message, 32, data_parallel_collective_s(one_share, 1, 32, message, "all_reduce"))
    assert bus_one_share == pytest.approx(50 * 0.8, rel=0.01)
    assert bus_one_share < 377 / 9


def test_two_p6_b300_and_two_p5_nodes_read_at_least_the_ring():
    """The same page: about 751 GB/s at 64 GiB on 2 x p6-b300 (16 EFA NICs of 400 Gb/s per node,
    800 GB/s) and about 480 GB/s on 2 x p5 (32 x 100 Gb/s, 400 GB/s). On p6-b300 the aggregated
    ring carries 8 x 100 GB/s x 0.8 = 640 GB/s (below NVLink's 720), 15% under the measurement as
    on p6-b200 (the 0.8 serves the all-to-alls too, which AWS measures lower). On p5, 480 GB/s exceeds
    any ring over 400 GB/s of NICs: on two nodes NCCL's tree sends each byte across the network
    once rather than 2 (n - 1) / n times, so the ring is a floor there, and the one-share ring
    (40 GB/s) is 12x below it."""
    b300 = node_cluster("p6-b300.48xlarge", 16)
    bus = _bus_gbytes_per_s(64 * GIB, 16, data_parallel_collective_s(b300, 1, 16, 64 * GIB, "all_reduce"))
    assert bus == pytest.approx(8 * 100 * 0.8, rel=0.01)
    assert bus < intra_node_link(b300).bytes_per_s / GB
    assert 751 * 0.8 <= bus <= 751
    p5 = node_cluster("p5.48xlarge", 16)
    p5_bus = _bus_gbytes_per_s(16 * GIB, 16, data_parallel_collective_s(p5, 1, 16, 16 * GIB, "all_reduce"))
    assert p5_bus == pytest.approx(8 * 50 * 0.8, rel=0.01)
    assert p5_bus <= 480
    assert inter_node_link(p5).bytes_per_s / GB * 12 <= 480


def test_a_data_parallel_ring_of_tensor_sliced_ranks_uses_its_members_nics():
    """At tp 2 each of a node's two data-parallel rings has 4 members there and crosses on their 4
    NICs (group_link); at tp 8 a ring has one member per node and one GPU's share either way."""
    cluster = node_cluster("p5.48xlarge", 64)
    message = 4 * GIB
    layouts = {2: (4, 8), 8: (1, 8)}
    for tp, (per_node, nodes) in layouts.items():
        expected = all_reduce_s(message, 64 // tp, group_link(cluster, per_node, nodes), nodes)
        assert data_parallel_collective_s(cluster, tp, 64 // tp, message, "all_reduce") == pytest.approx(expected)
    one_share = dataclasses.replace(cluster, ring_nic_aggregation=False)
    assert data_parallel_collective_s(one_share, 2, 32, message, "all_reduce") > 3 * data_parallel_collective_s(cluster, 2, 32, message, "all_reduce")
    assert data_parallel_collective_s(one_share, 8, 8, message, "all_reduce") == pytest.approx(
        data_parallel_collective_s(cluster, 8, 8, message, "all_reduce"))
    # Inside one node the ring is on NVLink whatever the flag says.
    assert data_parallel_collective_s(cluster, 1, 8, message, "reduce_scatter") == pytest.approx(
        data_parallel_collective_s(one_share, 1, 8, message, "reduce_scatter"))


def test_catalog_states_the_fact_with_its_source_and_keeps_the_default_elsewhere():
    for name in AWS_NODES:
        node = get_entry("nodes", name)
        assert node["ring_nic_aggregation"] is True
        assert "all_reduce_perf" in node["sources"]["ring_nic_aggregation"]
        assert cluster_spec_from_dict(node_cluster_entry(name, 64)).ring_nic_aggregation
    jean_zay = get_entry("nodes", "jean-zay-v100")
    assert jean_zay["ring_nic_aggregation"] is False and "7.27 GB/s" in jean_zay["sources"]["ring_nic_aggregation"]
    for name in ("dgx-a100-80gb", "dgx-h100", "hgx-b300", "gb200-nvl72"):
        assert not cluster_spec_from_dict(node_cluster_entry(name, 64)).ring_nic_aggregation
    # The AWS nodes carry the GPUs and per-GPU network of their instance types.
    expected = {"p5.48xlarge": ("h100-sxm5-80gb", 50.0), "p5en.48xlarge": ("h200-sxm-141gb", 50.0),
                "p6-b200.48xlarge": ("b200-sxm-180gb", 50.0), "p6-b300.48xlarge": ("b300-sxm-288gb", 100.0)}
    for name, (gpu, network) in expected.items():
        node = get_entry("nodes", name)
        assert (node["gpu"], node["inter_node_gbytes_per_s"], node["gpus_per_node"]) == (gpu, network, 8)


def test_a_zero3_step_on_p5_spends_less_on_its_gathers_than_on_one_share():
    """The step: a ZeRO-3 GPT-3-like model over 64 GPUs of p5, whose parameter gathers and gradient
    reduce-scatters cross 8 nodes, exposes less data-parallel time on every NIC than on one
    GPU's share; compute is the same."""
    cluster = node_cluster("p5.48xlarge", 64)
    model = get_model("gpt3-13b")
    training = TrainingSpec(global_batch_size=256, seq_length=2048)
    parallel = ParallelConfig(dp_size=64, tp_size=1, pp_size=1, zero_stage=ZeroStage.OS_G_P, micro_batch_size=1)
    aggregated = evaluate(model, cluster, training, parallel, num_gpus=64)
    one_share = evaluate(model, dataclasses.replace(cluster, ring_nic_aggregation=False), training, parallel, num_gpus=64)
    a, b = aggregated.prediction.breakdown_s, one_share.prediction.breakdown_s
    assert a.compute_s == pytest.approx(b.compute_s)
    assert a.dp_comm_exposed_s < b.dp_comm_exposed_s
    assert aggregated.prediction.step_time_s < one_share.prediction.step_time_s


def test_the_flag_must_be_a_boolean():
    with pytest.raises(SpecError) as error:
        dataclasses.replace(node_cluster("p5.48xlarge", 8), ring_nic_aggregation=1)
    assert error.value.field == "cluster.ring_nic_aggregation"


def test_an_inline_cluster_sets_it_through_http(api):
    """An inline cluster may state the fact; the plan stores it and the DP ring follows it. A
    non-boolean is a 422 naming the field."""
    inline = {"name": "my-efa-cluster", "gpu": "h100-sxm5-80gb", "gpus_per_node": 8, "num_nodes": 8,
              "intra_node_gbytes_per_s": 450.0, "inter_node_gbytes_per_s": 50.0}
    body = {"model": "gpt3-1.3b", "training": {"global_batch_size": 512, "seq_length": 2048},
            "parallel": {"dp_size": 64, "zero_stage": 3, "micro_batch_size": 1}}
    exposed = {}
    for flag in (False, True):
        response = api.post("/v1/evaluations", json={**body, "cluster": {**inline, "ring_nic_aggregation": flag}})
        assert response.status_code == 200, response.text
        exposed[flag] = response.json()["prediction"]["breakdown_s"]["dp_comm_exposed_s"]
    assert exposed[True] < exposed[False]
    bad = api.post("/v1/evaluations", json={**body, "cluster": {**inline, "ring_nic_aggregation": "yes"}})
    assert "body.cluster.ring_nic_aggregation" in error_fields(assert_problem(bad, 422))


def test_a_plan_on_an_aws_node_type_and_a_custom_cluster_keep_the_fact(api):
    """A plan on "p5.48xlarge" with a GPU count snapshots the node's fact with its source; a
    custom cluster stores it as given and shows it back."""
    body = {"model": "gpt3-1.3b", "cluster": "p5.48xlarge", "num_gpus": 64, "top_k": 1,
            "training": {"global_batch_size": 512, "seq_length": 2048}, "constraints": {"pp_size": 1}}
    response = api.post("/v1/plans", json=body)
    assert response.status_code in (200, 201), response.text
    entry = response.json()["catalog_snapshot"]["cluster"]["entry"]
    assert (entry["node"], entry["num_nodes"], entry["ring_nic_aggregation"]) == ("p5.48xlarge", 8, True)
    assert "all_reduce_perf" in entry["link_sources"]["ring_nic_aggregation"]
    name = unique_name("efa")
    custom = {"name": name, "gpu": "h100-sxm5-80gb", "gpus_per_node": 8, "num_nodes": 4, "intra_node_gbytes_per_s": 450.0,
              "inter_node_gbytes_per_s": 50.0, "ring_nic_aggregation": True}
    created = api.post("/v1/catalog/clusters", json=custom)
    assert created.status_code == 201, created.text
    assert api.get(f"/v1/catalog/clusters/{name}").json()["ring_nic_aggregation"] is True
    plain = api.get("/v1/catalog/clusters/dgx-h100-x8").json()
    assert plain.get("ring_nic_aggregation") in (None, False)


def test_the_catalogs_p5_clusters_carry_the_fact_and_the_instance_price():
    for name, nodes in (("p5.48xlarge-x8", 8), ("p5.48xlarge-x128", 128)):
        cluster = get_cluster(name)
        assert (cluster.num_nodes, cluster.gpus_per_node, cluster.ring_nic_aggregation) == (nodes, 8, True)
        assert cluster.gpu_hour_price_usd == pytest.approx(98.32 / 8, abs=0.01)
