"""Ring collectives over groups of whole NVLink domains follow how NCCL uses the hardware (issue 13,
mechanism 1): a ring with k members per domain crosses the network on k NICs, bus bandwidth
min(NVLink, k x per-GPU NIC share), which is what a tensor-parallel group larger than a node
gets. Point-to-point and all-to-all leave through one NIC. Checked against published nccl-tests
bus-bandwidth figures and against vTrain's measured tp = 16 iteration times."""

from __future__ import annotations

import dataclasses

import pytest

from conftest import node_cluster
from solver.cost.comm import (
    all_reduce_s,
    all_to_all_s,
    cp_link,
    data_parallel_collective_s,
    group_link,
    inter_node_link,
    intra_node_link,
    span_link,
    tp_link,
)

GB = 1e9



def test_a_ring_over_whole_nodes_uses_every_nic_of_each_node():
    """nccl-tests#119: 3 nodes of 8 A100-SXM4-40GB with 4 HDR NICs each (100 GB/s of NICs per
    node, 12.5 GB/s per GPU) measure an all-reduce bus bandwidth of 84.8 GB/s on average over
    sizes to 128 MB and about 96 GB/s at the top. One NIC's share (12.5 GB/s) is 7x off; 8
    members per node on all 4 NICs gives 100 GB/s x the ring's bus efficiency."""
    cluster = dataclasses.replace(node_cluster("dgx-a100-40gb", 24), inter_node_bytes_per_s=12.5 * GB)
    link = group_link(cluster, members_per_domain=8, domains=3)
    assert 84.8 * 0.9 <= link.bytes_per_s / GB <= 96 * 1.05
    assert inter_node_link(cluster).bytes_per_s / GB < 84.8 / 6
    # A TP group of the same 24 ranks (whole nodes) all-reduces over exactly that link.
    assert tp_link(cluster, 24) == link
    message = 1 * GB
    assert all_reduce_s(message, 24, tp_link(cluster, 24)) == pytest.approx(2 * 23 / 24 * message / link.bytes_per_s + 2 * 23 * link.latency_s, rel=0.05)


def test_nic_aggregation_is_capped_by_nvlink_and_by_members():
    """A DGX H100 node with 8 NDR NICs: NVIDIA quotes 46-48 GB/s per NDR NIC (AddyLaddy,
    nccl-tests#290) and about 370 GB/s of ring bus bandwidth over NVLink inside the node
    (sjeaugey, nccl-tests#212); a multi-node ring of whole nodes is bounded by both (at most
    8 x 48 GB/s), not by one NIC."""
    h100 = node_cluster("dgx-h100", 64)
    whole_nodes = group_link(h100, 8, 8).bytes_per_s / GB
    assert 0.8 * 370 <= whole_nodes <= 8 * 48
    assert whole_nodes <= intra_node_link(h100).bytes_per_s / GB
    one = group_link(h100, 1, 8)
    assert one == inter_node_link(h100)
    assert group_link(h100, 2, 8).bytes_per_s == pytest.approx(2 * one.bytes_per_s)
    assert group_link(h100, 8, 1) == intra_node_link(h100)  # inside one domain: NVLink
    fat_nics = dataclasses.replace(h100, inter_node_bytes_per_s=100 * GB)
    assert group_link(fat_nics, 8, 2).bytes_per_s == intra_node_link(fat_nics).bytes_per_s


def test_tensor_parallel_group_spanning_two_nodes():
    """vTrain's tp = 16 rows (two 8-GPU A100 nodes per TP group): each node holds 8 members, so the
    TP all-reduce crosses on 8 NICs, 8x one GPU's share, its steps between the nodes at the
    network's latency and the rest at NVLink's."""
    cluster = node_cluster("dgx-a100-80gb", 64)
    assert tp_link(cluster, 8) == intra_node_link(cluster)
    assert tp_link(cluster, 16).bytes_per_s == pytest.approx(8 * inter_node_link(cluster).bytes_per_s)
    assert tp_link(cluster, 16).latency_s == inter_node_link(cluster).latency_s
    assert tp_link(cluster, 16).intra_latency_s == intra_node_link(cluster).latency_s


def test_only_the_steps_between_domains_pay_the_network_latency():
    """NCCL's tuning model (NVIDIA/nccl src/graph/tuning.cc): a ring all-reduce over nRanks ranks on
    nNodes nodes takes 2 (nRanks - 1) steps, of which 2 (nNodes - 1) cross between nodes and pay
    the network's latency, the others the intra-node hop's; reduce-scatter and all-gather take
    nRanks - 1 steps with nNodes - 1 crossings. A ring of one member per node crosses on every
    step."""
    from solver.cost.comm import reduce_scatter_s, ring_all_reduce_s

    cluster = node_cluster("dgx-a100-80gb", 64)
    intra, inter = intra_node_link(cluster).latency_s, inter_node_link(cluster).latency_s
    assert inter > intra > 0
    tp16 = tp_link(cluster, 16)  # two whole nodes
    assert ring_all_reduce_s(0.0, 16, tp16) == pytest.approx(28 * intra + 2 * inter)
    assert reduce_scatter_s(0.0, 16, tp16) == pytest.approx(14 * intra + 1 * inter)
    tp32 = tp_link(cluster, 32)  # four whole nodes
    assert ring_all_reduce_s(0.0, 32, tp32) == pytest.approx(56 * intra + 6 * inter)
    one_per_node = group_link(cluster, 1, 8)
    assert ring_all_reduce_s(0.0, 8, one_per_node) == pytest.approx(14 * inter)
    assert all_reduce_s(0.0, 8, tp_link(cluster, 8)) == pytest.approx(14 * intra)  # inside one node
    # With no bytes to move NCCL's tree beats the ring across nodes (tests/test_comm_tree.py): a
    # chain of 7 NVLink hops and log2(2) = 1 network hop each way, 2 x 4 hops up and down for 4 nodes.
    assert all_reduce_s(0.0, 16, tp16) == pytest.approx(14 * intra + 2 * inter)
    assert all_reduce_s(0.0, 32, tp32) == pytest.approx(14 * intra + 4 * inter)
    # A data-parallel ring of 16 ranks, 8 per node, counts its steps the same way (one NIC's
    # bandwidth per GPU, data_parallel_collective_s); 8 nodes of one member each cross on every step.
    message = 1e9
    inter_bw = inter_node_link(cluster).bytes_per_s
    assert data_parallel_collective_s(cluster, 1, 16, message, "all_reduce") == pytest.approx(
        2 * 15 / 16 * message / inter_bw + 28 * intra + 2 * inter)
    assert data_parallel_collective_s(cluster, 8, 8, message, "all_gather") == pytest.approx(7 / 8 * message / inter_bw + 7 * inter)


def test_point_to_point_and_all_to_all_do_not_aggregate_nics():
    """sjeaugey (nccl-tests#267): alltoall cannot aggregate the bandwidth of multiple NICs. Its
    network share moves at one NIC's rate, and so do the send/recv pairs of pipeline p2p and of
    ring attention (context parallelism)."""
    cluster = node_cluster("dgx-h100", 16)
    message = 1 * GB
    inter = inter_node_link(cluster)
    expected_off_node_s = message * 8 / 16 / inter.bytes_per_s + inter.latency_s
    assert all_to_all_s(cluster, message, 16, 1) == pytest.approx(expected_off_node_s)
    assert span_link(cluster, 16) == inter and cp_link(cluster, 8, 2) == inter
    assert tp_link(cluster, 16).bytes_per_s == pytest.approx(8 * inter.bytes_per_s)


def test_a_data_parallel_ring_on_jean_zay_gets_one_nic_share_per_gpu():
    """BigScience measured NCCL's all-reduce on BLOOM's own cluster (bigscience-workshop/bigscience
    at 59a90eec, experiments/bandwidth/all_reduce_bench-a100-n4.txt, January 2022: Jean Zay
    gpu_p5, 4 nodes of 8 A100 80GB with 4 Omni-Path HFIs each, NCCL 2.10.3): a 4 GB fp32 buffer
    over 32 ranks in 1.531 s, a bus bandwidth of 40.5 Gb/s = 5.07 GB/s. That is each GPU's share
    of its node's four 100 Gb/s links at the ring's bus efficiency (6.25 x 0.8 = 5.0 GB/s), the
    bound ``data_parallel_collective_s`` uses, not the 8 NICs' worth a ring with 8 members per
    node could reach where NCCL spreads its channels over every NIC (nccl-tests#119 on HDR
    InfiniBand; the multi-NIC lead of docs/wip/README.md)."""
    cluster = dataclasses.replace(node_cluster("dgx-a100-80gb", 32), inter_node_bytes_per_s=6.25 * GB)
    message = 500_000 * 2_000 * 4  # all_reduce_bench.py: N x M fp32 elements
    predicted_s = data_parallel_collective_s(cluster, 1, 32, message, "all_reduce")
    assert predicted_s == pytest.approx(1.5312, rel=0.03)
    bus_gbytes_per_s = message * 2 * 31 / 32 / predicted_s / GB
    assert bus_gbytes_per_s == pytest.approx(40.5 / 8, rel=0.03)
