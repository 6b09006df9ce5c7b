"""NCCL's tree all-reduce where NCCL picks it (issue 13, mechanism 1: "hierarchical and tree
algorithms where NCCL picks them"). NCCL's tuning model (NVIDIA/nccl src/graph/tuning.cc,
ncclTopoTuneModel) costs a tree all-reduce at half of 0.92 x the ring's bus bandwidth, with
2 ((ranks per node - 1) intra-node hops + floor(log2 nodes) network hops) of latency against the
ring's 2 (nodes - 1) network hops, and runs whichever of the two it predicts faster. The figures
below are that model worked by hand on the catalog's DGX A100 (25 GB/s of network per GPU at a
bus efficiency of 0.8, 10 us network and 5 us NVLink latency)."""

from __future__ import annotations

import math

import pytest

from conftest import node_cluster
from solver.cost.comm import (
    TREE_BUS_BANDWIDTH_FRACTION,
    all_reduce_s,
    data_parallel_collective_s,
    intra_node_link,
    ring_all_reduce_s,
    tree_all_reduce_s,
)

MB = 1e6
NET_BUS_BYTES_PER_S = 25e9 * 0.8  # dgx-a100-80gb: one HDR NIC per GPU at the ring's bus efficiency
NET_LATENCY_S = 10e-6
NVLINK_LATENCY_S = 5e-6


def test_the_tree_constants_are_nccls():
    assert TREE_BUS_BANDWIDTH_FRACTION == 0.92


def test_small_buffers_over_many_nodes_take_the_tree():
    """A 100 MB data-parallel all-reduce over 1,024 nodes, one rank per node (tp 8): the ring pays
    2 x 1,023 network hops (20.5 ms) on top of 10.0 ms of bytes; the tree pays 2 x floor(log2
    1,024) = 20 hops (0.2 ms) on top of 100 MB / (0.46 x 20 GB/s) = 10.9 ms."""
    cluster = node_cluster("dgx-a100-80gb", 8 * 1024)
    message = 100 * MB
    ring_s = 2 * 1023 / 1024 * message / NET_BUS_BYTES_PER_S + 2 * 1023 * NET_LATENCY_S
    tree_s = message / (0.5 * 0.92 * NET_BUS_BYTES_PER_S) + 2 * 10 * NET_LATENCY_S
    assert ring_s == pytest.approx(30.45e-3, rel=1e-3)
    assert tree_s == pytest.approx(11.07e-3, rel=1e-3)
    assert data_parallel_collective_s(cluster, 8, 1024, message, "all_reduce") == pytest.approx(tree_s)


def test_large_buffers_stay_on_the_ring():
    """At 10 GB over the same 1,024 nodes the tree's 8% of bandwidth costs more (1.09 s against
    1.00 s of bytes) than the ring's 20 ms of hops; over 2 nodes the ring's latency is no worse."""
    message = 10_000 * MB
    for nodes in (2, 1024):
        cluster = node_cluster("dgx-a100-80gb", 8 * nodes)
        ring_s = 2 * (nodes - 1) / nodes * message / NET_BUS_BYTES_PER_S + 2 * (nodes - 1) * NET_LATENCY_S
        assert data_parallel_collective_s(cluster, 8, nodes, message, "all_reduce") == pytest.approx(ring_s)


def test_nccl_switches_where_the_two_costs_cross():
    """Ring and tree cost the same at M* = (ring hops - tree hops) x latency / (1 / (0.46 B) -
    2 (n - 1) / (n B)): 2.30 GB at 1,024 nodes, so at that scale the tree carries a data-parallel
    all-reduce of up to about a billion 16-bit gradients. Just below it the tree runs, just above the ring."""
    nodes = 1024
    cluster = node_cluster("dgx-a100-80gb", 8 * nodes)
    hops_saved_s = (2 * (nodes - 1) - 2 * math.log2(nodes)) * NET_LATENCY_S
    per_byte_s = 1 / (0.46 * NET_BUS_BYTES_PER_S) - 2 * (nodes - 1) / nodes / NET_BUS_BYTES_PER_S
    crossover = hops_saved_s / per_byte_s
    assert crossover == pytest.approx(2304 * MB, rel=0.01)
    below = data_parallel_collective_s(cluster, 8, nodes, 0.95 * crossover, "all_reduce")
    above = data_parallel_collective_s(cluster, 8, nodes, 1.05 * crossover, "all_reduce")
    ring_below = 2 * (nodes - 1) / nodes * 0.95 * crossover / NET_BUS_BYTES_PER_S + 2 * (nodes - 1) * NET_LATENCY_S
    tree_above = 1.05 * crossover / (0.46 * NET_BUS_BYTES_PER_S) + 2 * 10 * NET_LATENCY_S
    assert below < ring_below
    assert above < tree_above


def test_ranks_per_node_add_nvlink_hops_to_the_tree():
    """With 2 ranks of the group per node (tp 4) the tree's chain inside each node adds 2 x (2 - 1)
    NVLink hops; the ring's steps inside nodes pay NVLink latency too (2 x 2,047 steps, 2 x 1,023
    of them between nodes)."""
    nodes = 1024
    cluster = node_cluster("dgx-a100-80gb", 8 * nodes)
    message = 10 * MB
    ranks = 2 * nodes
    tree_s = message / (0.46 * NET_BUS_BYTES_PER_S) + 2 * (1 * NVLINK_LATENCY_S + 10 * NET_LATENCY_S)
    ring_s = (
        2 * (ranks - 1) / ranks * message / NET_BUS_BYTES_PER_S
        + 2 * (nodes - 1) * NET_LATENCY_S
        + (2 * (ranks - 1) - 2 * (nodes - 1)) * NVLINK_LATENCY_S
    )
    assert tree_s < ring_s
    assert data_parallel_collective_s(cluster, 4, ranks, message, "all_reduce") == pytest.approx(tree_s)


def test_inside_one_node_the_ring_runs():
    """NCCL's single-node tree is a chain with 0.92 of the ring's bandwidth and no fewer hops:
    inside an NVLink domain the all-reduce is the ring's."""
    cluster = node_cluster("dgx-a100-80gb", 8)
    link = intra_node_link(cluster)
    for message in (1 * MB, 1000 * MB):
        assert all_reduce_s(message, 8, link) == ring_all_reduce_s(message, 8, link)
        assert data_parallel_collective_s(cluster, 1, 8, message, "all_reduce") == ring_all_reduce_s(message, 8, link)
    assert tree_all_reduce_s(1 * MB, 8, link, domains=1) == ring_all_reduce_s(1 * MB, 8, link)


def test_reduce_scatter_and_all_gather_have_no_tree():
    """NCCL runs reduce-scatter and all-gather on rings (tuning.cc skips NCCL_ALGO_TREE for them):
    a ZeRO gather of a small buffer over 1,024 nodes still pays the ring's 1,023 hops."""
    nodes = 1024
    cluster = node_cluster("dgx-a100-80gb", 8 * nodes)
    message = 10 * MB
    ring_s = (nodes - 1) / nodes * message / NET_BUS_BYTES_PER_S + (nodes - 1) * NET_LATENCY_S
    assert data_parallel_collective_s(cluster, 8, nodes, message, "all_gather") == pytest.approx(ring_s)
