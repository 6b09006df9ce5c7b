"""The hardware of 2026 (issue 16): the GPUs and systems teams buy now, each value sourced; their
block-scaled precisions (MXFP8, NVFP4) with the quantisation traffic they add; and the NVLink
domain as a size of its own, so that a GB200 NVL72 rack (72 GPUs on one NVLink fabric, 4 per
host) keeps tensor-, context- and data-parallel groups of up to 72 GPUs on NVLink."""

from __future__ import annotations

from dataclasses import replace

import pytest

import catalog
from solver.cost.analytic import (
    FP8_CAST_KERNELS,
    FP8_CAST_TRANSPOSE_BYTES,
    MXFP8_QUANTISE_BYTES,
    NVFP4_QUANTISE_BYTES,
    _fp8_cast_s,
    analytic_profile,
)
from solver.cost.comm import (
    all_reduce_s,
    all_to_all_s,
    cp_link,
    dp_group_layout,
    group_link,
    inter_node_link,
    intra_node_link,
    ring_all_reduce_s,
    span_link,
    tp_link,
    tree_all_reduce_s,
)
from solver.cost.compute import bytes_per_element, elementwise_time_s
from solver.cost.evaluate import evaluate
from solver.cost.profile import ProfileShape
from solver.search.loop import search
from solver.search.request import Constraints, SearchRequest
from solver.spec.errors import SpecError
from solver.spec.hardware import ClusterSpec
from solver.spec.legality import placement_violations
from solver.spec.model import ModelSpec
from solver.spec.parallel import ParallelConfig
from solver.spec.rules import Rule
from solver.spec.training import Precision, TrainingSpec

NEW_GPUS = (
    "h800-sxm5-80gb", "h200-nvl-141gb", "b200-sxm-180gb", "b300-sxm-288gb", "gb200-186gb", "gb300-288gb", "mi325x", "mi355x",
)
NEW_NODES = (
    "hgx-h800", "hgx-h200-nvl", "hgx-b200", "hgx-b300", "gb200-nvl72", "gb300-nvl72", "mi325x-platform", "mi355x-platform",
)
NEW_CLUSTERS = (
    "hgx-h800-x256", "hgx-h200-nvl-x4", "hgx-b200-x8", "hgx-b200-x128", "hgx-b300-x8", "gb200-nvl72-x1", "gb200-nvl72-x8",
    "gb300-nvl72-x1", "gb300-nvl72-x8", "mi325x-x8", "mi355x-x8",
)
GPU_FIELDS = ("peak_tflops", "memory_gib", "hbm_gbytes_per_s", "gemm_efficiency", "hbm_efficiency", "num_sms", "gemm_saturation_dim")
TERA = 1e12


# --- The catalog -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", NEW_GPUS)
def test_every_new_gpu_loads_and_sources_every_number(name):
    entry = catalog.get_entry("gpus", name)
    gpu = catalog.get_gpu(name)
    assert gpu.name == name
    for key in GPU_FIELDS:
        assert key in entry, key
        assert len(entry["sources"].get(key, "")) > 20, f"{name}: {key} has no source"
    # A precision's efficiency is measured or says where it was carried over from.
    assert set(entry["gemm_efficiency"]) <= set(entry["peak_tflops"])


@pytest.mark.parametrize("name", NEW_NODES)
def test_every_new_node_loads_and_sources_its_links(name):
    entry = catalog.get_entry("nodes", name)
    for key in ("intra_node_gbytes_per_s", "inter_node_gbytes_per_s", "bus_efficiency", "latency"):
        assert len(entry["sources"].get(key, "")) > 20, f"{name}: {key} has no source"
    if entry["nvlink_domain_gpus"] != entry["gpus_per_node"]:
        assert len(entry["sources"].get("nvlink_domain_gpus", "")) > 20
    cluster = catalog.cluster_spec_from_dict(catalog.node_cluster_entry(name, None))
    assert cluster.domain_gpus == entry["nvlink_domain_gpus"]


@pytest.mark.parametrize("name", NEW_CLUSTERS)
def test_every_new_cluster_loads_and_has_a_source(name):
    entry = catalog.get_entry("clusters", name)
    assert len(entry["source"]) > 10
    cluster = catalog.get_cluster(name)
    assert cluster.num_gpus == entry["num_nodes"] * entry["gpus_per_node"]


# Per-GPU dense peaks, TFLOP/s, derived from the datasheet's own figures (sparse figures halved,
# system totals divided by their GPUs).
DATASHEET_PEAKS = [
    ("h800-sxm5-80gb", Precision.BF16, 1978.9 / 2),  # H800 SXM5: 1,979 with sparsity
    ("h800-sxm5-80gb", Precision.FP8, 1978.9),  # 3,958 with sparsity
    ("h200-nvl-141gb", Precision.BF16, 1671 / 2),  # H200 NVL: 1,671 with sparsity
    ("h200-nvl-141gb", Precision.FP8, 3341 / 2),
    ("b200-sxm-180gb", Precision.BF16, 36_000 / 8 / 2),  # HGX B200: 36 PF per 8 GPUs, sparse
    ("b200-sxm-180gb", Precision.FP8, 72_000 / 8 / 2),
    ("b200-sxm-180gb", Precision.MXFP8, 72_000 / 8 / 2),  # MXFP8 at the FP8 rate
    ("b200-sxm-180gb", Precision.NVFP4, 72_000 / 8),  # FP4: 144 sparse | 72 dense per 8 GPUs
    ("b300-sxm-288gb", Precision.BF16, 36_000 / 8 / 2),
    ("b300-sxm-288gb", Precision.FP8, 72_000 / 8 / 2),
    ("b300-sxm-288gb", Precision.NVFP4, 105_000 / 8),  # HGX B300 FP4: 144 sparse | 105 dense
    ("gb200-186gb", Precision.BF16, 360_000 / 72 / 2),  # GB200 NVL72: 360 PF sparse per rack
    ("gb200-186gb", Precision.FP8, 720_000 / 72 / 2),
    ("gb200-186gb", Precision.NVFP4, 1_440_000 / 72 / 2),
    ("gb300-288gb", Precision.BF16, 360_000 / 72 / 2),
    ("gb300-288gb", Precision.FP8, 720_000 / 72 / 2),
    ("gb300-288gb", Precision.NVFP4, 1_080_000 / 72),  # GB300 NVL72 FP4: 1,440 sparse | 1,080 dense
    ("mi325x", Precision.BF16, 1216 * 256 * 2 * 2.1e9 / TERA),  # matrix cores x FMA x 2 x clock
    ("mi325x", Precision.FP8, 2 * 1216 * 256 * 2 * 2.1e9 / TERA),
    ("mi355x", Precision.BF16, 1024 * 512 * 2 * 2.4e9 / TERA),
    ("mi355x", Precision.MXFP8, 2 * 1024 * 512 * 2 * 2.4e9 / TERA),
]


@pytest.mark.parametrize(("name", "precision", "tflops"), DATASHEET_PEAKS)
def test_peaks_match_the_datasheets(name, precision, tflops):
    assert catalog.get_gpu(name).peak(precision) / TERA == pytest.approx(tflops, abs=0.2)


# Maximum achievable matmul TFLOP/s as measured (stas00/ml-engineering's MAMF table for bf16; AMD's
# "Measuring Max-Achievable FLOPs - Part 2", ROCm blogs 2025-02-28, Table 1, for fp8).
ACHIEVABLE_MATMUL_TFLOPS = [
    ("mi300x", Precision.BF16, 668.4),
    ("mi300x", Precision.FP8, 1273.0),
    ("mi325x", Precision.BF16, 784.9),
    ("mi325x", Precision.FP8, 1519.0),
]


@pytest.mark.parametrize(("name", "precision", "tflops"), ACHIEVABLE_MATMUL_TFLOPS)
def test_gemm_efficiency_is_the_measured_achievable_matmul(name, precision, tflops):
    gpu = catalog.get_gpu(name)
    assert gpu.peak(precision) * gpu.efficiency(precision) / TERA == pytest.approx(tflops, rel=0.002)


def test_block_scaled_precisions_exist_only_where_the_tensor_cores_run_them():
    for name in ("b200-sxm-180gb", "b300-sxm-288gb", "gb200-186gb", "gb300-288gb"):
        gpu = catalog.get_gpu(name)
        assert gpu.supports(Precision.MXFP8) and gpu.supports(Precision.NVFP4)
        assert gpu.peak(Precision.MXFP8) == gpu.peak(Precision.FP8)
    mi355x = catalog.get_gpu("mi355x")  # CDNA4 runs OCP MX formats, not NVIDIA's NVFP4
    assert mi355x.supports(Precision.MXFP8) and not mi355x.supports(Precision.NVFP4)
    for name in ("h100-sxm5-80gb", "h200-sxm-141gb", "h800-sxm5-80gb", "h200-nvl-141gb", "mi325x"):
        gpu = catalog.get_gpu(name)
        assert not gpu.supports(Precision.MXFP8) and not gpu.supports(Precision.NVFP4)


def test_h800_is_an_h100_with_less_nvlink():
    h800, h100 = catalog.get_cluster("hgx-h800-x256"), catalog.get_cluster("dgx-h100-x128")
    assert h800.gpu.peak_flops_per_s == h100.gpu.peak_flops_per_s
    assert h800.num_gpus == 2048 and h800.gpus_per_node == 8
    assert h800.intra_node_bytes_per_s == 200e9  # 400 GB/s bidirectional
    assert h800.inter_node_bytes_per_s == 50e9  # 8 x 400 Gb/s per node


# --- The NVLink domain -------------------------------------------------------------------------


def test_an_nvl72_tp32_group_stays_on_nvlink_while_hgx_b200_crosses_the_network():
    nvl72, hgx = catalog.get_cluster("gb200-nvl72-x8"), catalog.get_cluster("hgx-b200-x128")
    assert (nvl72.gpus_per_node, nvl72.domain_gpus) == (4, 72)
    assert tp_link(nvl72, 32) == intra_node_link(nvl72)
    # On HGX B200 it spans 4 nodes, 8 members each: its rings cross the network on all 8 NICs
    # (solver.cost.comm.group_link), well below NVLink.
    assert tp_link(hgx, 32) == group_link(hgx, 8, 4)
    assert tp_link(hgx, 32).latency_s == inter_node_link(hgx).latency_s
    assert tp_link(hgx, 32).bytes_per_s == 8 * inter_node_link(hgx).bytes_per_s < intra_node_link(hgx).bytes_per_s
    assert tp_link(hgx, 8) == intra_node_link(hgx)
    assert span_link(nvl72, 72) == intra_node_link(nvl72) and span_link(nvl72, 144) == inter_node_link(nvl72)
    # Context parallelism spans tp x cp ranks: 8 x 8 on one rack.
    assert cp_link(nvl72, 8, 8) == intra_node_link(nvl72) and cp_link(hgx, 8, 8) == inter_node_link(hgx)
    # A gradient-reduction group of 18 ranks 4 apart fills one rack; on HGX it spans 9 nodes.
    assert dp_group_layout(nvl72, 4, 18) == (18, 1)
    assert dp_group_layout(hgx, 4, 18) == (2, 9)


def test_existing_clusters_keep_their_node_as_the_domain():
    for entry in catalog.list_entries("clusters"):
        if entry["name"] in NEW_CLUSTERS:
            continue
        cluster = catalog.get_cluster(entry["name"])
        assert cluster.domain_gpus == cluster.gpus_per_node
        assert span_link(cluster, cluster.gpus_per_node) == intra_node_link(cluster)
        assert span_link(cluster, cluster.gpus_per_node + 1) == inter_node_link(cluster)


def test_a_domain_must_divide_or_be_a_multiple_of_the_node():
    gpu = catalog.get_gpu("gb200-186gb")
    assert ClusterSpec("rack", gpu, 4, 18, 900e9, 50e9, nvlink_domain_gpus=72).domain_gpus == 72
    assert ClusterSpec("bridged", gpu, 8, 2, 450e9, 25e9, nvlink_domain_gpus=4).domain_gpus == 4
    assert ClusterSpec("plain", gpu, 8, 2, 450e9, 25e9).nvlink_domain_gpus == 8
    with pytest.raises(SpecError) as error:
        ClusterSpec("odd", gpu, 4, 18, 900e9, 50e9, nvlink_domain_gpus=6)
    assert error.value.field == "cluster.nvlink_domain_gpus"
    with pytest.raises(SpecError) as error:
        ClusterSpec("zero", gpu, 4, 18, 900e9, 50e9, nvlink_domain_gpus=0)
    assert error.value.field == "cluster.nvlink_domain_gpus"


def test_tp_may_fill_the_nvlink_domain_and_no_more():
    nvl72, hgx = catalog.get_cluster("gb200-nvl72-x1"), catalog.get_cluster("hgx-b200-x8")
    legal = lambda cluster, tp: not placement_violations(cluster, ParallelConfig(1, tp, 1), False)  # noqa: E731
    assert legal(nvl72, 72) and legal(nvl72, 36) and legal(nvl72, 8)
    assert not legal(nvl72, 16)  # ranks 64-79 straddle two racks
    assert not legal(hgx, 16) and legal(hgx, 8)
    [violation] = placement_violations(nvl72, ParallelConfig(1, 16, 1), False)
    assert violation.rule is Rule.TP_WITHIN_NODE and "NVLink domains of 72 GPUs" in violation.text


# A 72-head model whose TP split of 36 divides heads, KV heads and the MLP.
WIDE = ModelSpec("wide-72", 4, 9216, 72, 32000, 4096, num_kv_heads=72, ffn_hidden_size=36864, mlp_activation="swiglu")


def test_a_tp36_step_on_an_nvl72_rack_is_faster_than_the_same_rack_cut_into_8_gpu_domains():
    """The same GPUs, links and plan; only the NVLink domain differs. The compute is the same, so
    the whole difference is the TP group's all-reduces: inside the rack they run over NVLink, in
    the cut rack they cross the network between 5 domains, where NCCL takes the faster of its ring
    and its tree (``comm.all_reduce_s``). Each of the cut rack's all-reduces costs exactly that
    choice, and the rack's step is shorter by what its all-reduces save."""
    rack = catalog.get_cluster("gb200-nvl72-x1")
    cut = replace(rack, nvlink_domain_gpus=8)  # the same GPUs and links, NVLink only within 8
    training = TrainingSpec(72, 4096)
    parallel = ParallelConfig(2, 36, 1)
    on_nvlink = evaluate(WIDE, rack, training, parallel, 72)
    across = evaluate(WIDE, cut, training, parallel, 72)
    rack_s, cut_s = on_nvlink.prediction.breakdown_s, across.prediction.breakdown_s
    assert rack_s["compute_s"] == pytest.approx(cut_s["compute_s"])
    message = 2 * 4096 * WIDE.hidden_size  # one micro-batch's activations, 16 bit
    cut_link, rack_link = tp_link(cut, 36), tp_link(rack, 36)
    assert cut_link.domains == 5 and rack_link == intra_node_link(rack)
    one_cut_s = all_reduce_s(message, 36, cut_link)
    assert one_cut_s == min(ring_all_reduce_s(message, 36, cut_link), tree_all_reduce_s(message, 36, cut_link, 5))
    one_rack_s = all_reduce_s(message, 36, rack_link)
    assert one_rack_s < one_cut_s
    # Both steps run the same number of TP all-reduces of that size, so their TP times scale alike.
    assert rack_s["tp_comm_s"] / cut_s["tp_comm_s"] == pytest.approx(one_rack_s / one_cut_s, rel=1e-6)
    assert on_nvlink.prediction.step_time_s < across.prediction.step_time_s


def test_the_search_plans_tp_beyond_eight_on_nvl72_and_not_on_hgx():
    training = TrainingSpec(72, 4096)
    constraints = Constraints.parse({"tp_size": [36, 72], "recompute": ["full"]})
    nvl72 = search(SearchRequest(WIDE, catalog.get_cluster("gb200-nvl72-x1"), training, constraints=constraints, top_k=1))
    assert nvl72.best is not None and nvl72.best.parallel.tp_size in (36, 72)
    hgx = catalog.get_cluster("hgx-b200-x8")
    hgx72 = replace(hgx, num_nodes=9)
    refused = search(SearchRequest(WIDE, hgx72, training, constraints=constraints, top_k=1))
    assert refused.best is None


def test_a_node_type_sized_by_gpu_count_rounds_up_to_whole_racks():
    entry = catalog.node_cluster_entry("gb200-nvl72", 256)
    assert (entry["gpus_per_node"], entry["nvlink_domain_gpus"], entry["num_nodes"]) == (4, 72, 72)  # 4 racks
    assert "4 NVLink domains of 72 GPUs" in entry["source"]
    assert catalog.node_cluster_entry("gb300-nvl72", 72)["num_nodes"] == 18
    assert catalog.node_cluster_entry("hgx-b200", 20)["num_nodes"] == 3  # whole nodes, as before
    assert catalog.node_cluster_entry("hgx-h200-nvl", 12)["num_nodes"] == 2  # 4-GPU domains inside 8-GPU hosts


# --- Block-scaled precisions -------------------------------------------------------------------


def test_block_scaling_quantisation_bytes_golden():
    """Per element of a 16-bit tensor: MXFP8 reads it once and writes a rowwise and a columnwise
    FP8 copy with one E8M0 scale per 32 elements each; NVFP4 reads it for its amax, again to
    quantise, and writes two FP4 copies with one E4M3 scale per 16 elements each."""
    assert MXFP8_QUANTISE_BYTES == 2 + 1 + 1 + 2 / 32 == 4.0625
    assert NVFP4_QUANTISE_BYTES == 2 + 2 + 0.5 + 0.5 + 2 / 16 == 5.125
    assert bytes_per_element(Precision.MXFP8) == 1 + 1 / 32
    assert bytes_per_element(Precision.NVFP4) == 0.5 + 1 / 16
    assert bytes_per_element(Precision.FP8) == 1 and bytes_per_element(Precision.BF16) == 2


def test_block_scaling_overhead_scales_with_the_linear_layers_inputs():
    """As test_fp8's golden case: a GPT layer (ffn 4h) at tp 1 quantises 7h per token forward and
    9h backward, now at the block-scaled bytes per element (NVFP4 in twice the kernels)."""
    gpu = catalog.get_gpu("b200-sxm-180gb")
    model = ModelSpec("gpt", 24, 4096, 32, 50257, 2048)
    tokens = 4 * 2048
    for precision, per_element, kernels in (
        (Precision.FP8, FP8_CAST_TRANSPOSE_BYTES, FP8_CAST_KERNELS),
        (Precision.MXFP8, 4.0625, 4),
        (Precision.NVFP4, 5.125, 8),
    ):
        forward_s, backward_s = _fp8_cast_s(model, gpu, precision, tokens, 1)
        assert forward_s == pytest.approx(elementwise_time_s(gpu, per_element * 7 * 4096 * tokens, kernels=kernels))
        assert backward_s == pytest.approx(elementwise_time_s(gpu, per_element * 9 * 4096 * tokens, kernels=kernels))


def test_block_scaled_layers_pay_their_quantisation_and_nvfp4_gemms_run_faster():
    cluster = catalog.get_cluster("hgx-b200-x8")
    model = ModelSpec("gpt-4096", 4, 4096, 32, 50257, 2048)
    shape = ProfileShape(1, 4, False)
    layer = {
        p: analytic_profile(model, cluster, TrainingSpec(256, 2048, p), shape).transformer_layers[0]
        for p in (Precision.FP8, Precision.MXFP8, Precision.NVFP4)
    }
    # MXFP8 runs at FP8's peak and measured efficiency: it differs only by its quantisation.
    extra_s = sum(_fp8_cast_s(model, cluster.gpu, Precision.MXFP8, 4 * 2048, 1)) - sum(
        _fp8_cast_s(model, cluster.gpu, Precision.FP8, 4 * 2048, 1)
    )
    fp8_s = layer[Precision.FP8].forward_s + layer[Precision.FP8].backward_s
    mxfp8_s = layer[Precision.MXFP8].forward_s + layer[Precision.MXFP8].backward_s
    assert mxfp8_s > fp8_s and mxfp8_s - fp8_s == pytest.approx(extra_s, rel=0.05)
    assert layer[Precision.NVFP4].forward_s < layer[Precision.FP8].forward_s


def test_nvfp4_on_an_h100_is_refused_naming_the_precision():
    cluster = catalog.get_cluster("dgx-h100-x1")
    model = ModelSpec("gpt", 4, 2048, 16, 50257, 2048)
    with pytest.raises(SpecError) as error:
        evaluate(model, cluster, TrainingSpec(64, 2048, Precision.NVFP4), ParallelConfig(8, 1, 1), 8)
    assert error.value.field == "training.precision" and "nvfp4" in error.value.reason


def test_an_expert_parallel_all_to_all_of_64_stays_on_an_nvl72_racks_nvlink():
    """EP's all-to-all (solver.cost.comm.all_to_all_s) splits its bytes between the NVLink domain
    and the NICs: on an NVL72 rack 64 ranks exchange over NVLink only; on HGX B200 7 of 63 peers
    are in the node and the rest go through each GPU's NIC."""
    nvl72, hgx = catalog.get_cluster("gb200-nvl72-x8"), catalog.get_cluster("hgx-b200-x128")
    message = 64e6
    nvlink = intra_node_link(nvl72)
    assert all_to_all_s(nvl72, message, 64, 1) == pytest.approx(message * 63 / 64 / nvlink.bytes_per_s + nvlink.latency_s)
    network = inter_node_link(hgx)
    assert all_to_all_s(hgx, message, 64, 1) == pytest.approx(message * 56 / 64 / network.bytes_per_s + network.latency_s)
