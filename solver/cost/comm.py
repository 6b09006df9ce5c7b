"""Collective and point-to-point times with an alpha-beta model per link.

Ring algorithms (Thakur, Rabenseifner & Gropp 2005; Patarasuk & Yuan 2009, as NCCL implements
them): an all-reduce of M bytes over n ranks moves 2(n-1)/n * M per rank in 2(n-1) steps;
reduce-scatter and all-gather move (n-1)/n * M in n-1 steps. Each step costs the link latency
(alpha); bytes cost 1 / (bandwidth * bus efficiency) (beta). Bandwidths are per GPU, one
direction. Rank layout follows Megatron-LM: tensor parallel ranks are adjacent, then data
parallel, then pipeline (Narayanan et al. 2021 Sec 3.3), so TP groups sit inside a node first.
With context parallelism Megatron-core orders ranks tp-cp-dp-pp (``parallel_state``'s default
``order="tp-cp-ep-dp-pp"``): a CP group's ranks are tp apart, and the ranks that reduce gradients
together (data parallel with context parallel, dp x cp of them) are tp apart as well.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from solver.spec.hardware import ClusterSpec


@dataclass(frozen=True)
class Link:
    bytes_per_s: float  # effective: spec bandwidth x bus efficiency
    latency_s: float
    # A ring over several whole NVLink domains (``group_link``): only the steps that cross from one
    # domain to the next pay ``latency_s``, the others the NVLink hop's ``intra_latency_s`` (NCCL's
    # tuning model, src/graph/tuning.cc: a ring all-reduce has 2 (nNodes - 1) inter-node steps of its
    # 2 (nRanks - 1), reduce-scatter and all-gather nNodes - 1 of nRanks - 1). 0: every step pays
    # ``latency_s`` (inside one domain, or one member per domain).
    domains: int = 0
    intra_latency_s: float = 0.0


def _ring_link(cluster: ClusterSpec, bytes_per_s: float, members_per_domain: int, domains: int) -> Link:
    """A ring at ``bytes_per_s`` over ``domains`` NVLink domains with ``members_per_domain`` ranks
    in each: with one member per domain every step crosses between domains at the network's
    latency; with more, only the steps between domains do (``Link.domains``)."""
    inter = inter_node_link(cluster)
    if members_per_domain <= 1:
        return Link(bytes_per_s, inter.latency_s)
    return Link(bytes_per_s, inter.latency_s, domains, intra_node_link(cluster).latency_s)


def _ring_latency_s(link: Link, steps: int, inter_steps: int) -> float:
    """The step latencies of one ring collective of ``steps`` steps, ``inter_steps`` of which
    cross between domains when the link spans several (``Link.domains``)."""
    if link.domains <= 1:
        return steps * link.latency_s
    inter = min(steps, inter_steps)
    return (steps - inter) * link.intra_latency_s + inter * link.latency_s


def intra_node_link(cluster: ClusterSpec) -> Link:
    return Link(cluster.intra_node_bytes_per_s * cluster.intra_node_bus_efficiency, cluster.intra_node_latency_s)


def inter_node_link(cluster: ClusterSpec) -> Link:
    return Link(cluster.inter_node_bytes_per_s * cluster.inter_node_bus_efficiency, cluster.inter_node_latency_s)


# NCCL's tuning model (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel) costs a tree all-reduce
# at 0.92 of the bus bandwidth the ring gets over the same channels ("busBw * .92" for
# NCCL_ALGO_TREE and ncclFuncAllReduce), and converts it to algorithm bandwidth at half of it
# (ratio .5: each byte goes up the tree reduced and comes back down broadcast, pipelined).
TREE_BUS_BANDWIDTH_FRACTION = 0.92


def tree_all_reduce_s(message_bytes: float, ranks: int, link: Link, domains: int) -> float:
    """NCCL's tree all-reduce of ``message_bytes`` over ``ranks`` ranks spread evenly over
    ``domains`` NVLink domains (nodes), as NCCL's tuning model costs it (src/graph/tuning.cc,
    ncclTopoTuneModel; the double binary trees of NCCL 2.4): its bytes at half of 0.92 x the ring's
    bus bandwidth (``link.bytes_per_s``), and 2 ((ranks per domain - 1) intra-domain hops +
    floor(log2 domains) network hops) of latency, where a ring pays 2 (domains - 1) network hops.
    So the tree wins on small buffers over many nodes, the ring on large ones."""
    if ranks <= 1 or domains <= 1:
        return ring_all_reduce_s(message_bytes, ranks, link)
    per_domain = max(1, ranks // domains)
    intra_latency_s = link.intra_latency_s if link.domains > 1 else link.latency_s
    latency_s = 2 * ((per_domain - 1) * intra_latency_s + math.floor(math.log2(domains)) * link.latency_s)
    return message_bytes / (0.5 * TREE_BUS_BANDWIDTH_FRACTION * link.bytes_per_s) + latency_s


def ring_all_reduce_s(message_bytes: float, ranks: int, link: Link) -> float:
    """Ring all-reduce of ``message_bytes`` (each rank's full buffer): 2 (n - 1)/n of it per rank
    over 2 (n - 1) steps (see the module docstring)."""
    if ranks <= 1:
        return 0.0
    latency_s = _ring_latency_s(link, 2 * (ranks - 1), 2 * (link.domains - 1))
    return 2 * (ranks - 1) / ranks * message_bytes / link.bytes_per_s + latency_s


def all_reduce_s(message_bytes: float, ranks: int, link: Link, domains: int | None = None) -> float:
    """All-reduce of ``message_bytes`` (each rank's full buffer) over ``ranks`` ranks in
    ``domains`` NVLink domains (default ``link.domains``; pass it where the group has one member
    per domain, whose link does not record it). Inside one domain a ring; across domains NCCL picks
    the faster of its ring and tree by the same model (``tree_all_reduce_s``), so the tree's
    logarithmic latency takes over for small buffers on many nodes."""
    if ranks <= 1:
        return 0.0
    spanned = link.domains if domains is None else domains
    ring_s = ring_all_reduce_s(message_bytes, ranks, link)
    if spanned <= 1:
        return ring_s
    return min(ring_s, tree_all_reduce_s(message_bytes, ranks, link, spanned))


def reduce_scatter_s(message_bytes: float, ranks: int, link: Link, collectives: float = 1) -> float:
    """Ring reduce-scatter of a ``message_bytes`` buffer (each rank keeps 1/ranks of it), issued
    as ``collectives`` separate collectives (the bytes split between them; each pays the ring's
    n - 1 step latencies)."""
    if ranks <= 1:
        return 0.0
    latency_s = _ring_latency_s(link, ranks - 1, link.domains - 1)
    return (ranks - 1) / ranks * message_bytes / link.bytes_per_s + collectives * latency_s


def all_gather_s(message_bytes: float, ranks: int, link: Link, collectives: float = 1) -> float:
    """Ring all-gather producing a ``message_bytes`` buffer on every rank (same cost as reduce-scatter)."""
    return reduce_scatter_s(message_bytes, ranks, link, collectives)


def p2p_s(message_bytes: float, link: Link) -> float:
    return message_bytes / link.bytes_per_s + link.latency_s


def span_link(cluster: ClusterSpec, ranks: int) -> Link:
    """The link a group of ``ranks`` consecutive ranks communicates over: NVLink when they fit in
    one NVLink domain (``ClusterSpec.nvlink_domain_gpus``: a node of an HGX box, a whole GB200
    NVL72 rack), else the ring's slowest hop, each GPU's share of the NICs."""
    return intra_node_link(cluster) if ranks <= cluster.domain_gpus else inter_node_link(cluster)


def group_link(cluster: ClusterSpec, members_per_domain: int, domains: int) -> Link:
    """The effective link of one ring collective (all-reduce, reduce-scatter, all-gather) over a
    group with ``members_per_domain`` ranks in each of ``domains`` NVLink domains.

    NCCL builds one ring (or tree) per channel and binds each channel to its own NIC, so a group
    with k members per domain crosses the network on k NICs at once: bus bandwidth k x the
    per-GPU NIC share, capped by the NVLink hop every ring also takes inside the domain,
    min(NVLink, k x per-GPU NIC share); one member per domain gets one NIC's share, the classic
    ring bound. Of the ring's steps, those that go from one domain to the next pay the network's
    latency and the rest the NVLink hop's (NCCL's tuning model, src/graph/tuning.cc: a ring
    all-reduce over nNodes nodes has 2 (nNodes - 1) inter-node steps of its 2 (nRanks - 1); it
    charges those the network's latency and the others the intra-node one). Sources:
    NCCL's topology search gives each channel its own NIC (NVIDIA/nccl src/graph/search.cc);
    nccl-tests#119 measures 85-96 GB/s of all-reduce bus bandwidth over 3 whole nodes of 8 A100
    with 4 HDR NICs each (100 GB/s of NICs per node), where one NIC's share would be 12.5 GB/s.

    Used for groups of whole domains (``tp_link``: a TP group larger than a domain), the shape
    nccl-tests measures, and for data-parallel rings on clusters whose node type is measured to
    aggregate its NICs (``ClusterSpec.ring_nic_aggregation``). Elsewhere a data-parallel ring
    takes one NIC's share per GPU (``data_parallel_collective_s``): there the bench's evidence is
    split (llm-foundry's FSDP runs over RoCE moved about one NIC's worth per GPU, BigScience
    measured one share on Jean Zay's Omni-Path), see docs/wip/README.md."""
    intra = intra_node_link(cluster)
    if domains <= 1:
        return intra
    inter = inter_node_link(cluster)
    nics = max(1, min(members_per_domain, cluster.domain_gpus))
    return _ring_link(cluster, min(intra.bytes_per_s, nics * inter.bytes_per_s), members_per_domain, domains)


def tp_link(cluster: ClusterSpec, tp_size: int) -> Link:
    """TP groups are adjacent ranks: inside an NVLink domain unless tp_size exceeds it; then each
    of its tp / domain domains holds a whole domain of it, and its all-reduces cross the network
    on every NIC of the domain (``group_link``), not on one GPU's share."""
    domain = cluster.domain_gpus
    if tp_size <= domain:
        return intra_node_link(cluster)
    return group_link(cluster, domain, -(-tp_size // domain))


def pp_link(cluster: ClusterSpec, tp_size: int, dp_size: int, pp_size: int, cp_size: int = 1) -> Link:
    """Consecutive pipeline stages are tp*cp*dp ranks apart: same node only when a whole pipeline fits in one."""
    return span_link(cluster, tp_size * cp_size * dp_size * pp_size)


def cp_link(cluster: ClusterSpec, tp_size: int, cp_size: int) -> Link:
    """The link a context-parallel ring runs over. Its ranks are tp_size apart (tp-cp-dp-pp), so
    the group spans tp*cp consecutive ranks: inside a node when they fit in one, else the ring
    crosses nodes and its slowest hop goes through each GPU's share of the NICs."""
    return span_link(cluster, tp_size * cp_size)


def ring_exchange_s(message_bytes: float, cp_size: int, link: Link) -> float:
    """Ring attention's K/V circulation over a context-parallel group of ``cp_size``: cp - 1 steps,
    in each of which every rank sends ``message_bytes`` to the next rank and receives as many from
    the previous one at once (send/recv pairs; the link's bandwidth is per direction). Seconds,
    before any overlap with attention compute (Liu et al. 2023, Ring Attention, Sec 3;
    Megatron-core / Transformer Engine ``AttnFuncWithCPAndKVP2P``)."""
    if cp_size <= 1:
        return 0.0
    return (cp_size - 1) * p2p_s(message_bytes, link)


def ep_link_span(tp_size: int, ep_size: int) -> int:
    """Consecutive ranks one expert-parallel group spans: its ep ranks are ``tp_size`` apart, the
    expert tensor-parallel size (Megatron-core's expert rank grid tp-ep-dp-pp with the expert
    tensor-parallel size in tp's place; at its default, tp, and cp_size 1 this is the
    tp-cp-ep-dp-pp order of its dense grid)."""
    return tp_size * ep_size


def all_to_all_s(cluster: ClusterSpec, message_bytes: float, ep_size: int, tp_size: int) -> float:
    """One all-to-all over an expert-parallel group of ``ep_size`` ranks ``tp_size`` apart (the
    expert tensor-parallel size: tp by default, 1 when the experts are not split), in which
    every rank holds ``message_bytes`` and sends the (ep - 1)/ep of it bound for the other ranks,
    1/ep to each (token dispatch or combine, Lepikhin et al. 2020 GShard Sec 2.2; Megatron-core
    ``MoEAlltoAllTokenDispatcher``). Seconds.

    Unlike a ring, an all-to-all cannot route its inter-node bytes through NVLink to the node's
    other NICs: each rank's bytes for another node leave through that GPU's own share of the
    NICs (``inter_node_bytes_per_s`` is per GPU), while its bytes for ranks in its own node go
    over NVLink at the same time. The slower of the two sets the time, plus one latency of the
    link it crosses (NCCL posts every send and receive of the exchange at once). "Node" here is
    the NVLink domain (``ClusterSpec.nvlink_domain_gpus``): on a GB200 NVL72 rack an ep group of
    up to 72 ranks exchanges over NVLink alone."""
    if ep_size <= 1 or message_bytes <= 0:
        return 0.0
    in_node = ep_ranks_per_domain(cluster, ep_size, tp_size)
    intra, inter = intra_node_link(cluster), inter_node_link(cluster)
    intra_s = message_bytes * (in_node - 1) / ep_size / intra.bytes_per_s
    inter_s = message_bytes * (ep_size - in_node) / ep_size / inter.bytes_per_s
    latency_s = inter.latency_s if ep_size > in_node else intra.latency_s
    return max(intra_s, inter_s) + latency_s


def ep_ranks_per_domain(cluster: ClusterSpec, ep_size: int, tp_size: int) -> int:
    """How many ranks of an expert-parallel group of ``ep_size`` ranks ``tp_size`` apart share
    one NVLink domain (``ClusterSpec.domain_gpus``): this rank and its peers there."""
    domain = cluster.domain_gpus
    if tp_size >= domain:
        return 1
    return min(ep_size, domain // tp_size)


def forwarded_all_to_all_s(cluster: ClusterSpec, message_bytes: float, network_bytes: float, ep_size: int, tp_size: int) -> float:
    """One dispatch (or combine) of the flex dispatcher (DeepEP, HybridEP) over an expert-parallel
    group of ``ep_size`` ranks ``tp_size`` apart, in which every rank holds ``message_bytes`` of
    routed copies and sends ``network_bytes`` of them over the network: a token bound for several
    experts in another NVLink domain crosses once, to the rank of its own index there, which
    forwards it over NVLink (DeepSeek-V3, arXiv 2412.19437 Sec 3.2.2). Every copy for another
    rank crosses NVLink once, from its source or from the forwarding rank, so the NVLink side
    carries the message less the rank's own 1 / (ranks per domain); the network side goes through
    the GPU's own NIC share as in ``all_to_all_s``. The slower sets the time, plus the network's
    latency. Within one domain it is ``all_to_all_s``."""
    if ep_size <= 1 or message_bytes <= 0:
        return 0.0
    in_node = ep_ranks_per_domain(cluster, ep_size, tp_size)
    if ep_size <= in_node:
        return all_to_all_s(cluster, message_bytes, ep_size, tp_size)
    intra, inter = intra_node_link(cluster), inter_node_link(cluster)
    intra_s = message_bytes * (in_node - 1) / in_node / intra.bytes_per_s
    inter_s = network_bytes / inter.bytes_per_s
    return max(intra_s, inter_s) + inter.latency_s


def dp_group_layout(cluster: ClusterSpec, tp_size: int, dp_size: int, cp_size: int = 1) -> tuple[int, int]:
    """(members per NVLink domain, domains spanned) of one gradient-reduction group: the dp x cp
    ranks that hold the same parameters, tp_size apart (tp-cp-dp-pp order: cp ranks first, then
    dp). A domain is a node unless the cluster says otherwise (``nvlink_domain_gpus``)."""
    members = dp_size * cp_size
    domain = cluster.domain_gpus
    if tp_size >= domain:
        return 1, members
    per_domain = min(members, domain // tp_size)
    domains = -(-members // per_domain)
    return per_domain, domains


def data_parallel_collective_s(
    cluster: ClusterSpec, tp_size: int, dp_size: int, message_bytes: float, kind: str, collectives: float = 1,
    cp_size: int = 1,
) -> float:
    """A ring collective over one gradient-reduction group: the dp_size x cp_size ranks that hold
    the same parameters (its ranks are tp_size apart; with context parallelism gradients are
    reduced and ZeRO shards over data- and context-parallel ranks together, Megatron-core's
    ``data_parallel_group_with_context_parallel``), issued as ``collectives`` separate calls
    (reduce-scatter and all-gather; see ``reduce_scatter_s``).

    Inside a node the ring runs over NVLink. Once the group spans nodes, every rank's
    (n-1)/n share of the buffer crosses the network through that GPU's share of the node's NICs
    (``inter_node_bytes_per_s`` is per GPU), the ring's slowest link. This is the classic ring
    bound, and it is what measured ZeRO-3 scaling shows: Narayanan et al. 2021 Table 2 gets
    144, 88 and 44 TFLOP/s per GPU on 384, 768 and 1536 A100s at a fixed batch, a step time that
    stays near 69 s once parameter gathers dominate, i.e. about 20 GB/s per GPU for 4 x 2*Psi
    bytes; BigScience measured the same one-share ring with NCCL 2.10.3 on Jean Zay's A100 nodes
    (40.5 Gb/s of bus bandwidth, tests/test_comm_multi_nic.py).

    Where the cluster's node type is measured to aggregate (``ClusterSpec.ring_nic_aggregation``),
    a group with k members per domain crosses on k NICs at once instead (``group_link``: NCCL
    binds each channel to its own NIC), as nccl-tests' all_reduce_perf measures over EFA on AWS's
    p5 and p6 instances (catalog/data/nodes.json; tests/test_comm_nic_aggregation.py). Of the
    ring's steps only those between nodes pay the network's latency (``Link.domains``, NCCL's
    tuning model). ``kind`` is 'all_reduce', 'reduce_scatter' or 'all_gather'.
    """
    ranks = dp_size * cp_size
    if ranks <= 1 or message_bytes <= 0:
        return 0.0
    per_domain, domains = dp_group_layout(cluster, tp_size, dp_size, cp_size)
    if domains == 1:
        link = intra_node_link(cluster)
    elif cluster.ring_nic_aggregation:
        link = group_link(cluster, per_domain, domains)
    else:
        link = _ring_link(cluster, inter_node_link(cluster).bytes_per_s, per_domain, domains)
    if kind == "all_reduce":
        return all_reduce_s(message_bytes, ranks, link, domains)
    if kind in ("reduce_scatter", "all_gather"):
        return reduce_scatter_s(message_bytes, ranks, link, collectives)
    raise ValueError(f"unknown collective {kind!r}")


def overlapped_exposed_s(collective_s: float, compute_s: float, slowdown: float) -> float:
    """Seconds a collective adds to ``compute_s`` of compute it runs beside.

    While both run, compute goes 1 + ``slowdown`` times slower (``GpuSpec.overlap_slowdown``,
    Lee et al. 2025). A collective of K seconds beside C seconds of compute: if the compute
    outlasts it (K <= C (1 + s)) the step grows by K s / (1 + s), the work compute lost while
    the collective ran; otherwise the collective sets the pace and the step grows by K - C.
    """
    if collective_s <= 0:
        return 0.0
    return max(collective_s - compute_s, collective_s * slowdown / (1 + slowdown))
