"""Request and response schemas of the catalog, and the inline specs plan requests may carry.

Requests carry ``*SpecIn`` bodies. Responses show a catalog entry as the catalog holds it: the
spec, where its numbers come from, and whether it is built in. A ``Stored*Spec`` is a spec as a
plan stored it (a request's inline spec, or the catalog entry a name resolved to): what it was not
given is absent, not null.
"""

from typing import Annotated, Any, Literal

from pydantic import MISSING, BaseModel, ConfigDict, Field

from app.core.types import (
    Efficiency,
    EntryName,
    Flag,
    HbmGbytesPerS,
    HostMemoryGib,
    LatencyUs,
    LinkGbytesPerS,
    MemoryGib,
    NvmeGbytes,
    PeakTflopsValue,
    PriceUsd,
    Reference,
    Size,
)

PrecisionName = Literal["fp16", "bf16", "fp8", "mxfp8", "nvfp4"]
# Expert counts: DeepSeek-V3 has 256 routed experts; 4096 bounds a search's expert-parallel sizes.
ExpertCount = Annotated[int, Field(strict=True, ge=0, le=4096)]
LatentWidth = Annotated[int, Field(strict=True, ge=0, le=2**24)]
# A dropout probability, as solver.spec.model.ModelSpec bounds it: 0 (none) up to, not including, 1.
DropoutProbability = Annotated[float, Field(strict=True, ge=0, lt=1, allow_inf_nan=False)]
DROPOUT_DEFAULT = "; default 0.1 (Megatron-LM's); 0: no dropout, so no masks kept for backward"

# meta-llama/Meta-Llama-3-8B's config.json, the fields the reader takes.
HF_LLAMA3_8B_EXAMPLE = {
    "model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
    "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192,
    "hidden_act": "silu", "tie_word_embeddings": False,
}

GPT3_1_3B_EXAMPLE = {
    "name": "my-gpt-1.3b",
    "num_layers": 24,
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "num_kv_heads": 16,
    "ffn_hidden_size": 8192,
    "vocab_size": 50257,
    "seq_length": 2048,
    "mlp_activation": "gelu",
    "tied_embeddings": True,
    "architecture": "decoder",
}

CLUSTER_EXAMPLE = {
    "name": "my-a100-cluster",
    "gpu": "a100-sxm4-80gb",
    "gpus_per_node": 8,
    "num_nodes": 4,
    "intra_node_gbytes_per_s": 300.0,
    "inter_node_gbytes_per_s": 25.0,
    "intra_node_latency_us": 5.0,
    "inter_node_latency_us": 10.0,
    "gpu_hour_price_usd": 2.5,
}

# The cluster's NVLink domain (GPUs one NVLink switch fabric joins), where it is not the node.
NVLINK_DOMAIN = (
    "GPUs per NVLink domain, whose links intra_node_* describe (72 for a GB200 NVL72 rack of 4-GPU"
    " trays); default gpus_per_node; one of the two divides the other"
)
RING_NIC_AGGREGATION = (
    "whether a data-parallel or ZeRO ring with k members per NVLink domain crosses the network on k"
    " NICs at once (NCCL's channels each on their own NIC, as nccl-tests measures on the node type)"
    " instead of on one GPU's share; default false"
)

# Host facts offload is costed with (solver.cost.offload); a cluster without them cannot offload.
HOST_MEMORY = "host (CPU) memory per node, GiB; with pcie_gbytes_per_s and host_memory_gbytes_per_s, what offload needs"
PCIE = "host <-> GPU PCIe bandwidth per GPU, one direction, nominal decimal GB/s (offload)"
HOST_MEMORY_BANDWIDTH = "the node's nominal CPU memory bandwidth, all sockets, decimal GB/s (the CPU optimizer step of offload)"
# NVMe facts offload to NVMe is costed with (parallel.nvme_offload); without all three it cannot.
NVME_CAPACITY = "NVMe capacity per node that offload may write to, decimal GB; with the two NVMe bandwidths, what NVMe offload needs"
NVME_READ = "the node's sequential NVMe read bandwidth as measured on the offload volume (all drives together), decimal GB/s"
NVME_WRITE = "the node's sequential NVMe write bandwidth as measured on the offload volume (all drives together), decimal GB/s"

GPU_EXAMPLE = {
    "name": "my-gpu",
    "peak_tflops": {"bf16": 312.0, "fp16": 312.0},
    "memory_gib": 80.0,
    "hbm_gbytes_per_s": 2039.0,
    "gemm_efficiency": {"bf16": 0.8},
}


class ModelSpecIn(BaseModel):
    """A transformer's shape. ``num_kv_heads`` defaults to ``num_attention_heads`` (no GQA),
    ``ffn_hidden_size`` to 4 x ``hidden_size``."""

    model_config = ConfigDict(extra="forbid", title="ModelSpec", json_schema_extra={"examples": [GPT3_1_3B_EXAMPLE]})

    name: EntryName
    # At most 1024 layers (published models have under 200): keeps one search within seconds.
    num_layers: Annotated[int, Field(strict=True, ge=1, le=1024)]
    hidden_size: Size
    num_attention_heads: Size
    num_kv_heads: Size | None = None
    ffn_hidden_size: Size | None = None
    vocab_size: Size
    seq_length: Size
    mlp_activation: Literal["gelu", "swiglu", "squared_relu"] = "gelu"
    tied_embeddings: Flag = True
    architecture: Literal["decoder", "encoder"] = "decoder"
    position_embedding: Literal["learned", "none"] = "learned"
    # Mixture of experts (solver.spec.model.ModelSpec): absent for a dense model.
    num_experts: ExpertCount | None = Field(None, description="routed experts per MoE layer; 0 or 1: dense")
    experts_per_token: ExpertCount | None = Field(None, description="experts each token is routed to (top-k)")
    moe_ffn_hidden_size: Size | None = Field(None, description="one expert's MLP width; default: ffn_hidden_size")
    num_shared_experts: ExpertCount | None = Field(None, description="experts every token uses (DeepSeekMoE)")
    first_dense_layers: Annotated[int, Field(strict=True, ge=0, le=1024)] | None = Field(
        None, description="leading layers with a dense MLP (DeepSeek-V3: 3)"
    )
    moe_layer_interval: Annotated[int, Field(strict=True, ge=1, le=1024)] | None = Field(
        None, description="every n-th layer after the dense ones has experts (1: all)"
    )
    router: Literal["softmax_topk", "sigmoid_topk"] | None = None
    router_groups: ExpertCount | None = Field(
        None, description="group-limited routing: equal groups of experts (DeepSeek-V3: 8); 0 or 1: no limit"
    )
    router_group_topk: ExpertCount | None = Field(
        None, description="group-limited routing: the groups each token's top-k come from (DeepSeek-V3: 4)"
    )
    # Multi-head latent attention (DeepSeek-V2/V3): absent for standard attention.
    kv_lora_rank: LatentWidth | None = Field(None, description="K/V latent rank; above 0: multi-head latent attention")
    q_lora_rank: LatentWidth | None = None
    qk_head_dim: LatentWidth | None = None
    qk_rope_head_dim: LatentWidth | None = None
    v_head_dim: LatentWidth | None = None
    # Multi-token prediction (DeepSeek-V3): absent for none.
    mtp_num_layers: Annotated[int, Field(strict=True, ge=0, le=64)] | None = Field(
        None, description="multi-token prediction modules trained on the last stage (DeepSeek-V3: 1)"
    )
    head_dim: Annotated[int, Field(strict=True, ge=1, le=4096)] | None = Field(
        None, description="width of each attention head; default: hidden_size / num_attention_heads (Qwen3-30B-A3B: 128 on hidden 2048 with 32 heads)"
    )
    sliding_window: Annotated[int, Field(strict=True, ge=0, le=2**24)] | None = Field(
        None, description="tokens each query attends back over in the layers with a local window; 0 or absent: full attention"
    )
    sliding_window_fraction: Annotated[float, Field(gt=0, le=1)] | None = Field(
        None, description="share of the layers with the window (gpt-oss and Gemma 2: 0.5; Gemma 3: 5/6); absent: every layer"
    )
    # Dropout (absent: Megatron-LM's 0.1 each).
    hidden_dropout: DropoutProbability | None = Field(
        None, description="dropout probability of the embedding output and the residual branches" + DROPOUT_DEFAULT
    )
    attention_dropout: DropoutProbability | None = Field(
        None, description="dropout probability of the attention probabilities" + DROPOUT_DEFAULT
    )


class HfConfigIn(BaseModel):
    """A Hugging Face ``config.json`` to read a model's shape from (catalog/hf_config.py lists the
    model types read and the fields each takes)."""

    model_config = ConfigDict(
        extra="forbid", title="HfConfigConversion",
        json_schema_extra={"examples": [{"name": "my-llama3-8b", "config": HF_LLAMA3_8B_EXAMPLE}]},
    )

    name: EntryName
    seq_length: Size | None = Field(
        None, description="the model's sequence length; default: the config's longest position (max_position_embeddings)"
    )
    config: dict[str, Any] = Field(description="the model's config.json as published on the Hugging Face Hub")


class HfConfigModel(BaseModel):
    """A model read from a config.json: a ModelSpec to send inline as a request's ``model`` or to
    ``POST /v1/catalog/models``, and what of the model the planner does not cost."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    model: ModelSpecIn
    model_type: str = Field(description="the config's model_type")
    not_modelled: list[str] = Field(description="parts of the model the cost model leaves out or costs as something close")


class GpuSpecIn(BaseModel):
    """An accelerator: dense tensor-core peaks per precision, memory, HBM bandwidth (decimal GB/s)."""

    model_config = ConfigDict(extra="forbid", title="GpuSpec", json_schema_extra={"examples": [GPU_EXAMPLE]})

    name: EntryName
    peak_tflops: dict[PrecisionName, PeakTflopsValue] = Field(min_length=1)
    memory_gib: MemoryGib
    hbm_gbytes_per_s: HbmGbytesPerS
    gemm_efficiency: dict[PrecisionName, Efficiency] | None = None
    hbm_efficiency: Efficiency | None = None


class ClusterSpecIn(BaseModel):
    """A homogeneous cluster. Bandwidths are per GPU, one direction, decimal GB/s."""

    model_config = ConfigDict(extra="forbid", title="ClusterSpec", json_schema_extra={"examples": [CLUSTER_EXAMPLE]})

    name: EntryName
    gpu: Reference | GpuSpecIn = Field(description="a catalog GPU name or an inline GPU spec")
    gpus_per_node: Size
    num_nodes: Size
    intra_node_gbytes_per_s: LinkGbytesPerS
    inter_node_gbytes_per_s: LinkGbytesPerS
    intra_node_latency_us: LatencyUs | None = None
    inter_node_latency_us: LatencyUs | None = None
    intra_node_bus_efficiency: Efficiency | None = None
    inter_node_bus_efficiency: Efficiency | None = None
    gpu_hour_price_usd: PriceUsd | None = None
    nvlink_domain_gpus: Size | None = Field(None, description=NVLINK_DOMAIN)
    ring_nic_aggregation: Flag | None = Field(None, description=RING_NIC_AGGREGATION)
    host_memory_gib: HostMemoryGib | None = Field(None, description=HOST_MEMORY)
    pcie_gbytes_per_s: LinkGbytesPerS | None = Field(None, description=PCIE)
    host_memory_gbytes_per_s: LinkGbytesPerS | None = Field(None, description=HOST_MEMORY_BANDWIDTH)
    nvme_gbytes: NvmeGbytes | None = Field(None, description=NVME_CAPACITY)
    nvme_read_gbytes_per_s: LinkGbytesPerS | None = Field(None, description=NVME_READ)
    nvme_write_gbytes_per_s: LinkGbytesPerS | None = Field(None, description=NVME_WRITE)


# Responses. A field typed ``X | MISSING`` is absent when the entry does not carry it.


class PeakTflops(BaseModel):
    """Dense tensor-core peak per precision, TFLOP/s; a precision the GPU lacks is absent."""

    model_config = ConfigDict(extra="forbid")

    fp16: float | MISSING = Field(MISSING, description="FP16 peak, TFLOP/s")
    bf16: float | MISSING = Field(MISSING, description="BF16 peak, TFLOP/s")
    fp8: float | MISSING = Field(MISSING, description="FP8 peak, TFLOP/s")
    mxfp8: float | MISSING = Field(MISSING, description="MXFP8 (block-scaled FP8, OCP MX) peak, TFLOP/s")
    nvfp4: float | MISSING = Field(MISSING, description="NVFP4 (block-scaled FP4) peak, TFLOP/s")


class GemmEfficiency(BaseModel):
    """Fraction of the peak a large GEMM reaches, per precision; an absent precision uses bf16's."""

    model_config = ConfigDict(extra="forbid")

    fp16: float | MISSING = Field(MISSING, description="FP16 large-GEMM efficiency, a fraction of the peak")
    bf16: float | MISSING = Field(MISSING, description="BF16 large-GEMM efficiency, a fraction of the peak")
    fp8: float | MISSING = Field(MISSING, description="FP8 large-GEMM efficiency, a fraction of the peak")
    mxfp8: float | MISSING = Field(MISSING, description="MXFP8 large-GEMM efficiency, a fraction of the peak")
    nvfp4: float | MISSING = Field(MISSING, description="NVFP4 large-GEMM efficiency, a fraction of the peak")


class GemmSampleOut(BaseModel):
    """One timed GEMM of a calibration sweep: (m x k) @ (k x n)."""

    model_config = ConfigDict(extra="forbid", title="GemmSample")

    m: int
    n: int
    k: int
    seconds: float = Field(description="time of one GEMM")
    tflops_per_s: float = Field(description="achieved rate, TFLOP/s")


class GemmSweep(BaseModel):
    """The GEMMs timed per precision; a precision not measured is absent."""

    model_config = ConfigDict(extra="forbid")

    fp16: list[GemmSampleOut] | MISSING = MISSING
    bf16: list[GemmSampleOut] | MISSING = MISSING
    fp8: list[GemmSampleOut] | MISSING = MISSING


class GpuCalibration(BaseModel):
    """What ``partitura calibrate`` measured for a GPU (see ``PARTITURA_CATALOG_OVERRIDES``)."""

    model_config = ConfigDict(extra="forbid")

    device: str = Field(description="the device as the framework names it")
    warmup: int = Field(description="untimed runs before each measurement")
    repeats: int = Field(description="timed runs per measurement")
    stream_gbytes_per_s: float = Field(description="measured streaming bandwidth, decimal GB/s")
    gemms: GemmSweep
    best_fraction_of_peak_fp16: float | MISSING = Field(MISSING, description="fastest FP16 GEMM over the peak")
    best_fraction_of_peak_bf16: float | MISSING = Field(MISSING, description="fastest BF16 GEMM over the peak")
    best_fraction_of_peak_fp8: float | MISSING = Field(MISSING, description="fastest FP8 GEMM over the peak")


SOURCES_DESCRIPTION = "where each number comes from: field name -> source"
HBM_EFFICIENCY = "fraction of the HBM bandwidth streaming kernels reach"
LATENCY_US = "per-step latency of a ring collective, microseconds"
BUS_EFFICIENCY = "fraction of the link bandwidth a ring collective reaches"
PRICE = "USD per GPU-hour"


def _created_at() -> Any:
    """A custom entry's ISO 8601 timestamp, answered as the string it was stored as."""
    return Field(MISSING, description="when a custom entry was added", json_schema_extra={"format": "date-time"})


class StoredGpuSpec(BaseModel):
    """A GPU as a plan stored it: a catalog entry, or the request's inline spec."""

    model_config = ConfigDict(extra="forbid")

    name: str
    display_name: str | MISSING = MISSING
    vendor: str | MISSING = MISSING
    peak_tflops: PeakTflops
    memory_gib: float = Field(description="memory per GPU, GiB")
    hbm_gbytes_per_s: float = Field(description="HBM bandwidth, decimal GB/s")
    gemm_efficiency: GemmEfficiency | None | MISSING = MISSING
    hbm_efficiency: float | None | MISSING = Field(MISSING, description=HBM_EFFICIENCY)
    gemm_saturation_dim: float | MISSING = Field(
        MISSING, description="small-GEMM slowdown scale: d / (d + this) per GEMM dimension d (calibrated GPUs)"
    )
    num_sms: int | MISSING = Field(MISSING, description="streaming multiprocessors")
    exp_tera_per_s: float | MISSING = Field(
        MISSING, description="special-function-unit exponentials (MUFU.EX2), 10^12 per second: the softmax's exp in fused attention"
    )
    sources: dict[str, str] | MISSING = Field(MISSING, description=SOURCES_DESCRIPTION)
    measured: GpuCalibration | MISSING = MISSING


# defer_build=True: a model that answering a plan never uses builds its schema when first used,
# not when `partitura plan` imports this module (bench/cli.py, issue 17).
class GpuSpecOut(StoredGpuSpec):
    """A GPU as the catalog shows it: the optional spec fields are null when not given."""

    model_config = ConfigDict(defer_build=True)

    gemm_efficiency: GemmEfficiency | None = None
    hbm_efficiency: float | None = Field(None, description=HBM_EFFICIENCY)


class GpuEntry(GpuSpecOut):
    """A catalog GPU: its spec, where each number comes from, and whether it is built in."""

    model_config = ConfigDict(defer_build=True)

    builtin: bool


class StoredModelSpec(BaseModel):
    """A model as a plan or a profile stored it: a catalog entry, or an inline spec."""

    model_config = ConfigDict(extra="forbid")

    name: str
    display_name: str | MISSING = MISSING
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int | None | MISSING = Field(MISSING, description="key/value heads (GQA); default: num_attention_heads")
    ffn_hidden_size: int | None | MISSING = Field(MISSING, description="MLP width; default: 4 x hidden_size")
    vocab_size: int
    seq_length: int
    mlp_activation: str
    tied_embeddings: bool
    architecture: str
    position_embedding: str | MISSING = MISSING
    num_experts: int | None | MISSING = MISSING
    experts_per_token: int | None | MISSING = MISSING
    moe_ffn_hidden_size: int | None | MISSING = MISSING
    num_shared_experts: int | None | MISSING = MISSING
    first_dense_layers: int | None | MISSING = MISSING
    moe_layer_interval: int | None | MISSING = MISSING
    router: str | None | MISSING = MISSING
    router_groups: int | None | MISSING = MISSING
    router_group_topk: int | None | MISSING = MISSING
    kv_lora_rank: int | None | MISSING = MISSING
    q_lora_rank: int | None | MISSING = MISSING
    qk_head_dim: int | None | MISSING = MISSING
    qk_rope_head_dim: int | None | MISSING = MISSING
    v_head_dim: int | None | MISSING = MISSING
    mtp_num_layers: int | None | MISSING = MISSING
    head_dim: int | None | MISSING = MISSING
    sliding_window: int | None | MISSING = MISSING
    sliding_window_fraction: float | None | MISSING = MISSING
    hidden_dropout: float | None | MISSING = Field(MISSING, description="hidden dropout probability; absent: 0.1")
    attention_dropout: float | None | MISSING = Field(MISSING, description="attention dropout probability; absent: 0.1")
    source: str | MISSING = Field(MISSING, description="where the shape comes from")


class ModelEntry(StoredModelSpec):
    """A catalog model: its spec, its source, and whether it is built in (else custom)."""

    model_config = ConfigDict(defer_build=True)

    num_kv_heads: int | None = Field(None, description="key/value heads (GQA); default: num_attention_heads")
    ffn_hidden_size: int | None = Field(None, description="MLP width; default: 4 x hidden_size")
    tied_embeddings: bool = True
    position_embedding: str = "learned"
    builtin: bool
    created_at: str | MISSING = _created_at()


class StoredClusterSpec(BaseModel):
    """A cluster as a plan stored it: a catalog entry, or the request's inline spec."""

    model_config = ConfigDict(extra="forbid")

    name: str
    gpu: str | StoredGpuSpec = Field(description="a catalog GPU name or an inline GPU spec")
    gpus_per_node: int
    num_nodes: int
    intra_node_gbytes_per_s: float = Field(description="per GPU, one direction, decimal GB/s")
    inter_node_gbytes_per_s: float = Field(description="per GPU, one direction, decimal GB/s")
    intra_node_latency_us: float | None | MISSING = Field(MISSING, description=LATENCY_US)
    inter_node_latency_us: float | None | MISSING = Field(MISSING, description=LATENCY_US)
    intra_node_bus_efficiency: float | None | MISSING = Field(MISSING, description=BUS_EFFICIENCY)
    inter_node_bus_efficiency: float | None | MISSING = Field(MISSING, description=BUS_EFFICIENCY)
    gpu_hour_price_usd: float | None | MISSING = Field(MISSING, description=PRICE)
    nvlink_domain_gpus: int | None | MISSING = Field(MISSING, description=NVLINK_DOMAIN)
    ring_nic_aggregation: bool | None | MISSING = Field(MISSING, description=RING_NIC_AGGREGATION)
    host_memory_gib: float | None | MISSING = Field(MISSING, description=HOST_MEMORY)
    pcie_gbytes_per_s: float | None | MISSING = Field(MISSING, description=PCIE)
    host_memory_gbytes_per_s: float | None | MISSING = Field(MISSING, description=HOST_MEMORY_BANDWIDTH)
    nvme_gbytes: float | None | MISSING = Field(MISSING, description=NVME_CAPACITY)
    nvme_read_gbytes_per_s: float | None | MISSING = Field(MISSING, description=NVME_READ)
    nvme_write_gbytes_per_s: float | None | MISSING = Field(MISSING, description=NVME_WRITE)
    node: str | MISSING = Field(MISSING, description="the catalog node type")
    source: str | MISSING = Field(MISSING, description="where the cluster comes from")
    link_sources: dict[str, str] | MISSING = Field(MISSING, description=SOURCES_DESCRIPTION)


class ClusterEntry(StoredClusterSpec):
    """A catalog cluster: its spec, its sources, and whether it is built in (else custom)."""

    model_config = ConfigDict(defer_build=True)

    gpu: str | GpuSpecOut = Field(description="a catalog GPU name or an inline GPU spec")
    intra_node_latency_us: float | None = Field(None, description=LATENCY_US)
    inter_node_latency_us: float | None = Field(None, description=LATENCY_US)
    intra_node_bus_efficiency: float | None = Field(None, description=BUS_EFFICIENCY)
    inter_node_bus_efficiency: float | None = Field(None, description=BUS_EFFICIENCY)
    gpu_hour_price_usd: float | None = Field(None, description=PRICE)
    builtin: bool
    created_at: str | MISSING = _created_at()


class GpuList(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid")

    items: list[GpuEntry]


class ModelList(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid")

    items: list[ModelEntry]


class ClusterList(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid")

    items: list[ClusterEntry]


class NodeEntry(BaseModel):
    """A built-in node type: one host's GPUs and links, with their sources. A request names it as
    its ``cluster`` with a ``num_gpus`` (``"cluster": "p5.48xlarge", "num_gpus": 64``) and plans on
    as many nodes (whole NVLink domains where one spans hosts) as that needs."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    name: str
    display_name: str
    gpu: str = Field(description="the catalog GPU it holds")
    gpus_per_node: int = Field(description="GPUs per host (server, compute tray)")
    nvlink_domain_gpus: int | MISSING = Field(MISSING, description=NVLINK_DOMAIN)
    intra_node_gbytes_per_s: float = Field(description="per GPU, one direction, decimal GB/s")
    inter_node_gbytes_per_s: float = Field(description="per GPU, one direction, decimal GB/s")
    intra_node_latency_us: float = Field(description=LATENCY_US)
    inter_node_latency_us: float = Field(description=LATENCY_US)
    intra_node_bus_efficiency: float = Field(description=BUS_EFFICIENCY)
    inter_node_bus_efficiency: float = Field(description=BUS_EFFICIENCY)
    ring_nic_aggregation: bool | MISSING = Field(MISSING, description=RING_NIC_AGGREGATION)
    host_memory_gib: float | MISSING = Field(MISSING, description=HOST_MEMORY)
    pcie_gbytes_per_s: float | MISSING = Field(MISSING, description=PCIE)
    host_memory_gbytes_per_s: float | MISSING = Field(MISSING, description=HOST_MEMORY_BANDWIDTH)
    nvme_gbytes: float | MISSING = Field(MISSING, description=NVME_CAPACITY)
    nvme_read_gbytes_per_s: float | MISSING = Field(MISSING, description=NVME_READ)
    nvme_write_gbytes_per_s: float | MISSING = Field(MISSING, description=NVME_WRITE)
    sources: dict[str, str] = Field(description=SOURCES_DESCRIPTION)
    builtin: bool


class NodeList(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid")

    items: list[NodeEntry]


class StackFacts(BaseModel):
    """The training facts a software stack sets (each a request may override)."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    flash_attention: bool
    fused_kernels: bool
    overlap_grad_reduce: bool
    zero3_collectives: Literal["per_layer", "per_tensor"]
    zero3_overlap: bool
    tp_comm_overlap: bool
    overlap_p2p_comm: bool
    host_s_per_layer: float = Field(description="host time per transformer layer and forward pass, s (0: not measured)")
    moe_host_s_per_layer: float = Field(
        description="host time per MoE layer and forward pass that the token dispatcher keeps in step with the GPU, s (0: not measured)"
    )
    selective_recompute: Literal["attention", "op"] = Field(
        description="what selective recomputation keeps: attention (recompute the attention core, Megatron) or op (torchtitan's per-op policy)"
    )
    grad_reduce: Literal["half", "fp32", "fp32_for_bf16", "fp32_beside_half"] = Field(
        description=(
            "dtype of the gradients held and reduced over data parallelism (fp32_for_bf16: fp32 when parameters are bf16; "
            "fp32_beside_half: DeepSpeed's BF16_Optimizer, the 16-bit gradients beside an fp32 accumulation buffer)"
        )
    )
    loss_dtype: Literal["fp32", "half"] = Field(description="dtype the cross entropy computes in (its memory at the loss)")
    loss_kernel: Literal["fused", "compiled", "eager", "in_place"] = Field(
        description=(
            "how the cross entropy runs: a fused kernel, compiled with the model when fused_kernels, eager, "
            "or in_place (Transformer Engine's, its gradient written into the 16-bit logits); its memory at the loss"
        )
    )
    low_precision_saved_inputs: bool = Field(description="FP8-family GEMMs keep their inputs for backward in the low-precision copy (Transformer Engine)")
    ep_comm_overlap: bool = Field(description="MoE dispatch and combine all-to-alls run beside another micro-batch's compute (combined 1F1B, DualPipe)")
    autocast_weights: bool = Field(
        description="fp32 parameters under torch.autocast: fp32 gradients and autocast's 16-bit copy of each weight (its memory)"
    )
    grad_bucket_copy: bool = Field(description="PyTorch DDP's all-reduce buckets are a second copy of the gradients (gradient_as_bucket_view off)")
    loss_keeps_logits: bool = Field(description="the training loop still references the 16-bit logits when backward starts (its memory at the loss)")
    sp_saved_input: Literal["sharded", "gathered"] = Field(
        description=(
            "under sequence parallelism, a column-parallel GEMM keeps its sequence-sharded input (Megatron: gathered again in backward) "
            "or the all-gathered one (DTensor)"
        )
    )
    expert_gemms: Literal["grouped", "per_expert"] = Field(
        description=(
            "how a rank's local experts run their GEMMs: one grouped kernel for all of them, or one launch per expert "
            "(Transformer Engine's GroupedLinear, DeepSpeed-MoE's loop; with MXFP8 one quantisation kernel per expert too)"
        )
    )
    flash_kernel: Literal["fa2", "fa1"] = Field(
        description=(
            "the fused attention kernel's generation where flash_attention is true: fa2 (FlashAttention-2, cuDNN, PyTorch SDPA) "
            "or fa1 (FlashAttention 1.x or its Triton port, twice fa2's time)"
        )
    )
    step_grad_copy_bytes_per_param: int = Field(
        description="bytes per parameter of the gradient copy the optimizer step makes one sub-group at a time (DeepSpeed ZeRO-3: 6)"
    )
    optimizer_sub_group_params: int = Field(
        description="parameters the optimizer steps at a time (DeepSpeed's sub_group_size; 0: the whole local shard)"
    )
    allocator_fragmentation_fraction: float = Field(
        description="memory the caching allocator reserves beyond its allocated peak, as a fraction of that peak (max reserved / max allocated - 1)"
    )
    kv_head_subsharding: bool = Field(
        description="tensor parallelism may exceed the KV heads (any multiple of them): the QKV activations are all-gathered over the TP group and sliced"
    )
    fp8_attention: bool = Field(
        description="the fused attention kernel runs its GEMMs in FP8 (Transformer Engine's fp8_dpa, cuDNN FP8 attention); only with precision fp8 or mxfp8"
    )
    fp8_output_proj: bool = Field(
        description="the output layer's logits GEMM runs in MXFP8 (Megatron-core's fp8_output_proj); only with precision mxfp8"
    )
    zero_reduce_bucket_params: int = Field(
        description=(
            "DeepSpeed ZeRO-1/2's gradient reduce bucket (reduce_bucket_size, 16-bit elements): ZeRO-1 flattens each bucket into a new "
            "tensor for its reduction after backward, ZeRO-2 holds a contiguous buffer of that size through every backward; 0: none"
        )
    )
    zero_step_norm_copies: bool = Field(
        description=(
            "the optimizer step checks and measures each gradient through copies (DeepSpeed ZeRO-1/2: an fp32 copy for the overflow "
            "check, then an fp64 one for the norm, of one gradient's partition at a time)"
        )
    )
    jit_dropout_masks: bool = Field(
        description=(
            "the hidden dropouts' masks are kept even without dropout (a TorchScript bias-dropout-add, whose autodiff draws and "
            "keeps the mask at p = 0: Megatron-LM and Megatron-DeepSpeed before torch.compile)"
        )
    )


class StackFactSources(BaseModel):
    """Where each fact comes from."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    flash_attention: str
    fused_kernels: str
    overlap_grad_reduce: str
    zero3_collectives: str
    zero3_overlap: str
    tp_comm_overlap: str
    overlap_p2p_comm: str
    host_s_per_layer: str
    moe_host_s_per_layer: str
    selective_recompute: str
    grad_reduce: str
    loss_dtype: str
    loss_kernel: str
    low_precision_saved_inputs: str
    ep_comm_overlap: str
    autocast_weights: str
    grad_bucket_copy: str
    loss_keeps_logits: str
    sp_saved_input: str
    expert_gemms: str
    flash_kernel: str
    step_grad_copy_bytes_per_param: str
    optimizer_sub_group_params: str
    allocator_fragmentation_fraction: str
    kv_head_subsharding: str
    fp8_attention: str
    fp8_output_proj: str
    zero_reduce_bucket_params: str
    zero_step_norm_copies: str
    jit_dropout_masks: str


class StackEntry(BaseModel):
    """A software stack a plan can assume (``training.stack``)."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    name: str
    display_name: str
    framework: Literal["any", "megatron", "deepspeed", "fsdp", "torchtitan"] = Field(description="whose parallelism rules it follows")
    era: int = Field(description="the year its behaviour describes")
    facts: StackFacts
    sources: StackFactSources
    default: bool = Field(description="assumed by a request that names no stack")
    builtin: bool


class StackList(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid")

    items: list[StackEntry]


def entry_dict(entry: dict[str, Any], builtin: bool) -> dict[str, Any]:
    return {**entry, "builtin": builtin}
