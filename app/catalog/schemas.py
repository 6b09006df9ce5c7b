"""Request and response schemas of the catalog, and the inline specs plan requests may carry."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.core.types import EntryName, Fraction, NonNegativeFloat, PositiveFloat, Size

PrecisionName = Literal["fp16", "bf16", "fp8"]

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
    mlp_activation: Literal["gelu", "swiglu"] = "gelu"
    tied_embeddings: bool = True
    architecture: Literal["decoder", "encoder"] = "decoder"
    position_embedding: Literal["learned", "none"] = "learned"


class GpuSpecIn(BaseModel):
    """An accelerator: dense tensor-core peaks per precision, memory, HBM bandwidth (decimal GB/s)."""

    model_config = ConfigDict(extra="forbid", title="GpuSpec", json_schema_extra={"examples": [GPU_EXAMPLE]})

    name: EntryName
    peak_tflops: dict[PrecisionName, PositiveFloat] = Field(min_length=1)
    memory_gib: PositiveFloat
    hbm_gbytes_per_s: PositiveFloat
    gemm_efficiency: dict[PrecisionName, Fraction] | None = None
    hbm_efficiency: Fraction | None = None


class ClusterSpecIn(BaseModel):
    """A homogeneous cluster. Bandwidths are per GPU, one direction, decimal GB/s."""

    model_config = ConfigDict(extra="forbid", title="ClusterSpec", json_schema_extra={"examples": [CLUSTER_EXAMPLE]})

    name: EntryName
    gpu: str | GpuSpecIn = Field(description="a catalog GPU name or an inline GPU spec")
    gpus_per_node: Size
    num_nodes: Size
    intra_node_gbytes_per_s: PositiveFloat
    inter_node_gbytes_per_s: PositiveFloat
    intra_node_latency_us: NonNegativeFloat | None = None
    inter_node_latency_us: NonNegativeFloat | None = None
    intra_node_bus_efficiency: Fraction | None = None
    inter_node_bus_efficiency: Fraction | None = None
    gpu_hour_price_usd: NonNegativeFloat | None = None


class GpuEntry(GpuSpecIn):
    """A catalog GPU: its spec, where each number comes from, and whether it is built in."""

    model_config = ConfigDict(extra="allow")

    # Looser than the input spec: the catalog data may list precisions the API does not take yet.
    peak_tflops: dict[str, float]
    gemm_efficiency: dict[str, float] | None = None
    builtin: bool


class ModelEntry(ModelSpecIn):
    """A catalog model: its spec, its source, and whether it is built in (else custom)."""

    model_config = ConfigDict(extra="allow")

    mlp_activation: str
    architecture: str
    position_embedding: str = "learned"
    builtin: bool


class ClusterEntry(ClusterSpecIn):
    """A catalog cluster: its spec, its sources, and whether it is built in (else custom)."""

    model_config = ConfigDict(extra="allow")

    builtin: bool


class GpuList(BaseModel):
    items: list[GpuEntry]


class ModelList(BaseModel):
    items: list[ModelEntry]


class ClusterList(BaseModel):
    items: list[ClusterEntry]


def entry_dict(entry: dict[str, Any], builtin: bool) -> dict[str, Any]:
    return {**entry, "builtin": builtin}
