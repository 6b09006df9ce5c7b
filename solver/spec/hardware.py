"""What the hardware is: a GPU type and a cluster of nodes of it.

Calibration constants (achievable GEMM fraction, HBM and collective efficiency) are fields here,
filled from the catalog (``catalog/data``), where each value carries its source. A spec that does
not give one (an inline API GPU or cluster, a spec built in code) gets the default below, stated
once here with its source; the catalog's conversion does not restate them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from solver.spec.errors import SpecError, check_in_range
from solver.spec.training import Precision

# --- Plausible ranges ---------------------------------------------------------------------------
# Each hardware figure must lie in a range wide enough for any accelerator built or announced (a
# 2017 V100 to a 2026 rack-scale part, with orders of magnitude to spare) and narrow enough that
# every prediction stays a finite number: a denormal efficiency or bandwidth (5e-324) would make a
# kernel or collective time infinite, or divide by zero once it underflows.
PEAK_FLOPS_PER_S_RANGE = (1e9, 1e18)  # 1 GFLOP/s to 1 EFLOP/s per GPU
MEMORY_BYTES_RANGE = (2**20, 2**50)  # 1 MiB to 1 PiB per GPU
HBM_BYTES_PER_S_RANGE = (1e8, 1e15)  # 0.1 GB/s to 1 PB/s
LINK_BYTES_PER_S_RANGE = (1e6, 1e15)  # 1 MB/s to 1 PB/s per GPU and direction
LATENCY_S_RANGE = (0.0, 1.0)  # per collective step
EFFICIENCY_RANGE = (1e-3, 1.0)  # 0.1% to 100% of a peak: GEMM, HBM streaming, collective bus
SATURATION_DIM_RANGE = (0.0, 1e6)  # k at half efficiency (the short-k penalty)
NUM_SMS_RANGE = (1, 100_000)
EXP_PER_S_RANGE = (1e9, 1e15)  # SFU exponentials per second: 10^9 to 10^15
OVERLAP_SLOWDOWN_RANGE = (0.0, 10.0)  # compute beside a collective: as fast as alone to 11x slower
GPU_HOUR_PRICE_USD_RANGE = (0.0, 1e6)  # beyond it a cost is no longer meaningful (and may overflow)
HOST_MEMORY_BYTES_RANGE = (2**20, 2**60)  # 1 MiB to 1 EiB of host memory per node
NVME_BYTES_RANGE = (2**20, 2**60)  # 1 MiB to 1 EiB of NVMe drives per node

# --- GPU defaults -------------------------------------------------------------------------------
# Streaming multiprocessors: the A100's 108 (NVIDIA A100 Tensor Core GPU Architecture whitepaper).
# Every built-in GPU states its own (data/gpus.json); an inline API GPU cannot, so it is costed
# with an A100's SM count.
DEFAULT_NUM_SMS = 108
# Short-k penalty of solver.cost.compute: CUTLASS's default A100 (SM80) fp16/bf16 tensor-op GEMM
# (include/cutlass/gemm/device/default_gemm_configuration.h: 128x256x64 threadblock tiles,
# kStages = 3) runs a 3-stage mainloop over 64-wide k tiles, so its prologue and epilogue cost
# about 3 x 64 = 192 iterations' worth of k. Derived from that kernel configuration, not fitted:
# `partitura calibrate` fits a per-GPU value (profiler/calibrate.py). An A100 value: each built-in
# GPU states its own in data/gpus.json with its source (the A100 value, so marked, where none has
# been measured on that GPU).
DEFAULT_GEMM_SATURATION_DIM = 192.0
# Fraction of spec HBM bandwidth that streaming element-wise kernels reach: STREAM-style copies on
# A100 reach about 80% (data/gpus.json a100 entries; Jia et al. 2018 measure 0.83 on V100).
DEFAULT_HBM_EFFICIENCY = 0.8
# Per-kernel launch overhead added to every GEMM and element-wise kernel: an assumed round 5 us,
# the few-microsecond order of a CUDA kernel launch seen in empty-kernel launch timings. Not
# measured per GPU and not fitted by `partitura calibrate`; no catalog entry overrides it.
KERNEL_LAUNCH_S = 5e-6
# Compute that runs beside a NCCL collective shares SMs, caches and HBM bandwidth with it: Lee et
# al. 2025 ("Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed Deep
# Learning", arXiv 2507.03114) measure GPT and Llama layers on A100, H100, MI250 and MI210
# overlapped with their collectives at an average 18.9% slower than alone (at most 40%). Their
# average, for every GPU; not fitted. solver.cost.schedule charges it to the compute a
# collective hides behind.
DEFAULT_OVERLAP_SLOWDOWN = 0.189

# Block-scaled GEMM precisions (OCP MX / NVIDIA NVFP4): a GPU states their peaks only where its
# tensor cores run them (Blackwell, AMD CDNA4), so a request for one on a GPU without it is refused.
BLOCK_SCALED = (Precision.MXFP8, Precision.NVFP4)

# --- Cluster defaults ---------------------------------------------------------------------------
# Per-step latency of a ring collective: a few microseconds on NVLink, about 10 us over
# InfiniBand (nccl-tests small-message times; data/nodes.json "latency" sources).
DEFAULT_INTRA_NODE_LATENCY_S = 5e-6
DEFAULT_INTER_NODE_LATENCY_S = 10e-6
# Fraction of one-way link bandwidth a NCCL ring collective reaches (nccl-tests busbw / nominal):
# an A100 node all-reduce reaches about 80% of the 300 GB/s NVLink spec; the same fraction is
# assumed for InfiniBand rings (data/nodes.json "bus_efficiency" sources).
DEFAULT_BUS_EFFICIENCY = 0.8


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator type.

    ``peak_flops_per_s`` holds dense tensor-core peaks per precision (no sparsity);
    ``gemm_efficiency`` the fraction of that peak a large, well-shaped GEMM reaches (measured);
    ``num_sms`` the streaming multiprocessors (compute units) that GEMM tiles are spread over;
    ``gemm_saturation_dim`` the k (inner dimension) at which a GEMM reaches half of its
    large-k efficiency (see ``solver.cost.compute``);
    ``hbm_efficiency`` the fraction of HBM bandwidth that streaming element-wise kernels reach;
    ``kernel_launch_s`` the fixed time each kernel adds;
    ``overlap_slowdown`` how much slower compute runs while a collective runs beside it (0.189:
    18.9% slower). Defaults: see the module constants.
    ``exp_per_s`` the exponentials per second its special function units run (MUFU.EX2, the
    softmax's exp inside a fused attention kernel); None where no source states it (no
    exponential term is charged, see ``solver.cost.analytic``).
    """

    name: str
    peak_flops_per_s: dict[Precision, float] = field(hash=False)
    memory_bytes: int
    hbm_bytes_per_s: float
    gemm_efficiency: dict[Precision, float] = field(hash=False)
    num_sms: int = DEFAULT_NUM_SMS
    gemm_saturation_dim: float = DEFAULT_GEMM_SATURATION_DIM
    hbm_efficiency: float = DEFAULT_HBM_EFFICIENCY
    kernel_launch_s: float = KERNEL_LAUNCH_S
    overlap_slowdown: float = DEFAULT_OVERLAP_SLOWDOWN
    exp_per_s: float | None = None

    def __post_init__(self) -> None:
        peaks = {Precision(k): float(v) for k, v in self.peak_flops_per_s.items()}
        effs = {Precision(k): float(v) for k, v in self.gemm_efficiency.items()}
        object.__setattr__(self, "peak_flops_per_s", peaks)
        object.__setattr__(self, "gemm_efficiency", effs)
        if not peaks:
            raise SpecError("gpu.peak_flops_per_s", "at least one precision is needed")
        for precision, value in peaks.items():
            check_in_range(f"gpu.peak_flops_per_s.{precision.value}", value, *PEAK_FLOPS_PER_S_RANGE, "FLOP/s")
        for precision, value in effs.items():
            check_in_range(f"gpu.gemm_efficiency.{precision.value}", value, *EFFICIENCY_RANGE)
        check_in_range("gpu.memory_bytes", self.memory_bytes, *MEMORY_BYTES_RANGE, "bytes")
        check_in_range("gpu.hbm_bytes_per_s", self.hbm_bytes_per_s, *HBM_BYTES_PER_S_RANGE, "bytes/s")
        check_in_range("gpu.hbm_efficiency", self.hbm_efficiency, *EFFICIENCY_RANGE)
        check_in_range("gpu.gemm_saturation_dim", self.gemm_saturation_dim, *SATURATION_DIM_RANGE)
        check_in_range("gpu.num_sms", self.num_sms, *NUM_SMS_RANGE)
        check_in_range("gpu.kernel_launch_s", self.kernel_launch_s, *LATENCY_S_RANGE, "s")
        check_in_range("gpu.overlap_slowdown", self.overlap_slowdown, *OVERLAP_SLOWDOWN_RANGE)
        if self.exp_per_s is not None:
            check_in_range("gpu.exp_per_s", self.exp_per_s, *EXP_PER_S_RANGE, "exp/s")

    def supports(self, precision: Precision) -> bool:
        return precision in self.peak_flops_per_s

    def peak(self, precision: Precision) -> float:
        try:
            return self.peak_flops_per_s[precision]
        except KeyError:
            raise SpecError(
                "training.precision", f"{self.name} has no {precision.value} tensor-core peak"
            ) from None

    def efficiency(self, precision: Precision) -> float:
        """Large-GEMM efficiency; a precision without its own measurement uses bf16's (a
        block-scaled one FP8's first: the same tensor-core rate, the scales applied inside it)."""
        if precision in self.gemm_efficiency:
            return self.gemm_efficiency[precision]
        fallbacks: tuple[Precision, ...] = (Precision.BF16, Precision.FP16)
        if precision in BLOCK_SCALED:
            fallbacks = (Precision.FP8, *fallbacks)
        for fallback in fallbacks:
            if fallback in self.gemm_efficiency:
                return self.gemm_efficiency[fallback]
        return next(iter(self.gemm_efficiency.values()))


@dataclass(frozen=True)
class ClusterSpec:
    """A homogeneous cluster: ``num_nodes`` nodes (hosts) of ``gpus_per_node`` GPUs, whose GPUs
    form NVLink domains of ``nvlink_domain_gpus`` consecutive GPUs.

    The NVLink domain is the set of GPUs one switch fabric joins, which need not be a host: a
    GB200 NVL72 rack joins 72 GPUs (18 trays of 4) with one NVLink switch fabric, and an H200 NVL
    server of 8 PCIe cards joins them in 4-GPU NVLink bridges. ``intra_node_*`` describe the link
    inside a domain, ``inter_node_*`` the one between domains (each GPU's share of the NICs); the
    field names keep their original node wording. ``nvlink_domain_gpus`` defaults to
    ``gpus_per_node`` (a domain is a node, as in every DGX/HGX box), and one of the two must divide
    the other. A cluster need not fill its last domain: ranks fill the domains in order.

    Link bandwidths are per GPU, one direction, in bytes/s (the catalog stores decimal GB/s).
    ``*_bus_efficiency`` is the fraction of link bandwidth a NCCL ring collective reaches.
    """

    name: str
    gpu: GpuSpec
    gpus_per_node: int
    num_nodes: int
    intra_node_bytes_per_s: float
    inter_node_bytes_per_s: float
    intra_node_latency_s: float = DEFAULT_INTRA_NODE_LATENCY_S
    inter_node_latency_s: float = DEFAULT_INTER_NODE_LATENCY_S
    intra_node_bus_efficiency: float = DEFAULT_BUS_EFFICIENCY
    inter_node_bus_efficiency: float = DEFAULT_BUS_EFFICIENCY
    gpu_hour_price_usd: float | None = None
    extra: dict = field(default_factory=dict, compare=False, hash=False)
    nvlink_domain_gpus: int | None = None  # None: gpus_per_node; set to it after construction
    # Whether a data-parallel (or ZeRO) ring with k members in each NVLink domain crosses the
    # network on k NICs at once (NCCL binds each channel to its own NIC) or on one GPU's share of
    # them: a measured fact of the node type and its network stack, not a rule for every cluster
    # (solver.cost.comm.data_parallel_collective_s has the measurements either way). False keeps
    # the one-share ring.
    ring_nic_aggregation: bool = False
    # Host facts for offload (solver.cost.offload), None where unknown: a cluster without them
    # cannot offload (Rule.OFFLOAD_NEEDS_HOST), and nothing else reads them.
    host_memory_bytes: float | None = None  # host (CPU) memory per node
    pcie_bytes_per_s: float | None = None  # host <-> GPU link per GPU, one direction (nominal)
    host_memory_bytes_per_s: float | None = None  # the node's CPU memory bandwidth (all sockets)
    # NVMe facts for offload to NVMe (ZeRO-Infinity, solver.cost.offload), None where unknown: a
    # cluster without all three cannot keep offloaded states on NVMe (Rule.OFFLOAD_NEEDS_NVME).
    # Per node: the capacity of the drives offload writes to, and their sequential read and
    # write bandwidth as the node reaches them (every drive together, e.g. one RAID-0 volume,
    # measured as fio, DeepSpeed's ds_io or ds_nvme_tune measure it: drive sheets' peaks are not
    # reached through the file system; no efficiency is applied to these).
    nvme_bytes: float | None = None
    nvme_read_bytes_per_s: float | None = None
    nvme_write_bytes_per_s: float | None = None

    def __post_init__(self) -> None:
        if self.nvlink_domain_gpus is None:
            object.__setattr__(self, "nvlink_domain_gpus", self.gpus_per_node)
        for name in ("gpus_per_node", "num_nodes", "nvlink_domain_gpus"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SpecError(f"cluster.{name}", f"must be a positive integer, got {value!r}")
        if not isinstance(self.ring_nic_aggregation, bool):
            raise SpecError("cluster.ring_nic_aggregation", f"must be true or false, got {self.ring_nic_aggregation!r}")
        domain, node = self.domain_gpus, self.gpus_per_node
        if domain % node and node % domain:
            raise SpecError(
                "cluster.nvlink_domain_gpus",
                f"{domain} GPUs per NVLink domain neither divides nor is a multiple of {node} GPUs per node",
            )
        for name in ("intra_node_bytes_per_s", "inter_node_bytes_per_s"):
            check_in_range(f"cluster.{name}", getattr(self, name), *LINK_BYTES_PER_S_RANGE, "bytes/s")
        for name in ("intra_node_latency_s", "inter_node_latency_s"):
            check_in_range(f"cluster.{name}", getattr(self, name), *LATENCY_S_RANGE, "s")
        for name in ("intra_node_bus_efficiency", "inter_node_bus_efficiency"):
            check_in_range(f"cluster.{name}", getattr(self, name), *EFFICIENCY_RANGE)
        if self.gpu_hour_price_usd is not None:
            check_in_range("cluster.gpu_hour_price_usd", self.gpu_hour_price_usd, *GPU_HOUR_PRICE_USD_RANGE, "USD")
        if self.host_memory_bytes is not None:
            check_in_range("cluster.host_memory_bytes", self.host_memory_bytes, *HOST_MEMORY_BYTES_RANGE, "bytes")
        for name in ("pcie_bytes_per_s", "host_memory_bytes_per_s", "nvme_read_bytes_per_s", "nvme_write_bytes_per_s"):
            if getattr(self, name) is not None:
                check_in_range(f"cluster.{name}", getattr(self, name), *LINK_BYTES_PER_S_RANGE, "bytes/s")
        if self.nvme_bytes is not None:
            check_in_range("cluster.nvme_bytes", self.nvme_bytes, *NVME_BYTES_RANGE, "bytes")

    @property
    def num_gpus(self) -> int:
        return self.gpus_per_node * self.num_nodes

    @property
    def has_host_facts(self) -> bool:
        """Whether offload can be costed: host memory, PCIe and host memory bandwidth are given."""
        return None not in (self.host_memory_bytes, self.pcie_bytes_per_s, self.host_memory_bytes_per_s)

    @property
    def has_nvme_facts(self) -> bool:
        """Whether offload to NVMe can be costed: the host facts, and NVMe capacity, read and write
        bandwidth (the CPU still steps the optimizer and PCIe still carries the copies)."""
        return self.has_host_facts and None not in (self.nvme_bytes, self.nvme_read_bytes_per_s, self.nvme_write_bytes_per_s)

    @property
    def domain_gpus(self) -> int:
        """GPUs per NVLink domain (``nvlink_domain_gpus``, resolved: never None)."""
        return int(self.nvlink_domain_gpus or self.gpus_per_node)
