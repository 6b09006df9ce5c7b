"""Catalog entries (and inline API specs) to the solver's dataclasses.

Units are in the keys: GiB, decimal GB/s, TFLOP/s and microseconds at this edge; bytes, bytes/s,
FLOP/s and seconds inside the solver. A knob with a solver default (``solver.spec.hardware``:
SM count, short-k saturation, HBM and bus efficiencies, latencies) that the entry does not give is
left to that default, stated there once with its source and never restated here; only
gemm_efficiency, which the solver requires, has its fallback below. Nothing in this module looks
a name up: a cluster's GPU arrives resolved (see ``catalog.specs``).
"""

from __future__ import annotations

from typing import Any

from solver.spec.errors import SpecError
from solver.spec.hardware import ClusterSpec, GpuSpec
from solver.spec.model import ModelSpec
from solver.spec.training import Precision

GIB_BYTES = 2**30  # memory_gib: binary GiB
GB_BYTES = 10**9  # *_gbytes_per_s: decimal GB/s, as spec sheets state bandwidth
TERA = 10**12  # peak_tflops
MICRO = 1e-6  # *_latency_us

# A GPU spec without gemm_efficiency (an inline API GPU may omit it) gets this fraction of peak
# for each of its precisions. Assumed, with no measurement behind it: a round figure near the
# measured maxima of the NVIDIA parts in data/gpus.json (H100 0.803, A100 0.869; stas00).
DEFAULT_GEMM_EFFICIENCY = 0.8

# Optional GPU knobs: (entry key, GpuSpec field, type). Absent keys keep GpuSpec's default.
GPU_OPTIONAL = (
    ("hbm_efficiency", "hbm_efficiency", float),
    ("num_sms", "num_sms", int),
    ("gemm_saturation_dim", "gemm_saturation_dim", float),
    # SFU exponentials (MUFU.EX2) in 10^12 per second, the softmax's exp in fused attention.
    ("exp_tera_per_s", "exp_per_s", lambda value: float(value) * TERA),
)

# Optional cluster figures: (entry key, ClusterSpec field, scale to SI). Absent keys keep
# ClusterSpec's default.
CLUSTER_OPTIONAL = (
    ("intra_node_latency_us", "intra_node_latency_s", MICRO),
    ("inter_node_latency_us", "inter_node_latency_s", MICRO),
    ("intra_node_bus_efficiency", "intra_node_bus_efficiency", 1.0),
    ("inter_node_bus_efficiency", "inter_node_bus_efficiency", 1.0),
    ("gpu_hour_price_usd", "gpu_hour_price_usd", 1.0),
    # Host facts offload is costed with (solver.cost.offload); absent: the cluster cannot offload.
    ("host_memory_gib", "host_memory_bytes", GIB_BYTES),
    ("pcie_gbytes_per_s", "pcie_bytes_per_s", GB_BYTES),
    ("host_memory_gbytes_per_s", "host_memory_bytes_per_s", GB_BYTES),
    # NVMe facts offload to NVMe is costed with; absent: offloaded states stay in host memory.
    ("nvme_gbytes", "nvme_bytes", GB_BYTES),
    ("nvme_read_gbytes_per_s", "nvme_read_bytes_per_s", GB_BYTES),
    ("nvme_write_gbytes_per_s", "nvme_write_bytes_per_s", GB_BYTES),
)

# What a software stack sets (data/stacks.json "facts"): TrainingSpec fields, by name.
STACK_FACTS = (
    "flash_attention", "fused_kernels", "overlap_grad_reduce", "zero3_collectives", "zero3_overlap",
    "tp_comm_overlap", "overlap_p2p_comm", "host_s_per_layer", "moe_host_s_per_layer", "selective_recompute",
    "grad_reduce", "loss_dtype", "loss_kernel", "low_precision_saved_inputs", "ep_comm_overlap",
    "autocast_weights", "grad_bucket_copy", "loss_keeps_logits", "sp_saved_input", "expert_gemms", "flash_kernel",
    "step_grad_copy_bytes_per_param", "optimizer_sub_group_params", "allocator_fragmentation_fraction",
    "kv_head_subsharding", "fp8_attention", "fp8_output_proj", "zero_reduce_bucket_params", "zero_step_norm_copies",
    "jit_dropout_masks",
)

MODEL_FIELDS = (
    "name", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size",
    "vocab_size", "seq_length", "mlp_activation", "tied_embeddings", "architecture", "position_embedding",
    # Mixture of experts and multi-head latent attention (absent: dense, standard attention).
    "num_experts", "experts_per_token", "moe_ffn_hidden_size", "num_shared_experts", "first_dense_layers",
    "moe_layer_interval", "router", "router_groups", "router_group_topk",
    "kv_lora_rank", "q_lora_rank", "qk_head_dim", "qk_rope_head_dim", "v_head_dim",
    # Multi-token prediction modules (absent: none); heads not hidden / heads wide (absent: that width).
    "mtp_num_layers", "head_dim",
    # Sliding-window attention (absent: full attention in every layer).
    "sliding_window", "sliding_window_fraction",
    # Dropout probabilities (absent: Megatron-LM's 0.1 each).
    "hidden_dropout", "attention_dropout",
)
MODEL_REQUIRED = ("name", "num_layers", "hidden_size", "num_attention_heads", "vocab_size", "seq_length")


def gpu_spec_from_dict(data: dict[str, Any], field: str = "gpu") -> GpuSpec:
    """A GpuSpec from a catalog entry or an inline API GPU spec (peak_tflops, memory_gib, ...).

    Raises SpecError naming ``field`` and the offending key."""
    try:
        peaks = {Precision(k): float(v) * TERA for k, v in data["peak_tflops"].items()}
        effs = data.get("gemm_efficiency") or {k: DEFAULT_GEMM_EFFICIENCY for k in data["peak_tflops"]}
        return GpuSpec(
            name=str(data["name"]),
            peak_flops_per_s=peaks,
            memory_bytes=int(float(data["memory_gib"]) * GIB_BYTES),
            hbm_bytes_per_s=float(data["hbm_gbytes_per_s"]) * GB_BYTES,
            gemm_efficiency={Precision(k): float(v) for k, v in effs.items()},
            # The calibration fields an entry gives, each cast to its field's type.
            **{target: cast(data[key]) for key, target, cast in GPU_OPTIONAL if data.get(key) is not None},  # type: ignore[arg-type]
        )
    except KeyError as missing:
        raise SpecError(f"{field}.{missing.args[0]}", "is required") from None
    except ValueError as bad:
        if isinstance(bad, SpecError):
            raise SpecError(f"{field}.{bad.field.split('.', 1)[-1]}", bad.reason) from None
        raise SpecError(field, str(bad)) from None


def model_spec_from_dict(data: dict[str, Any]) -> ModelSpec:
    """A ModelSpec from a catalog entry or an inline API ModelSpec."""
    kwargs = {k: data[k] for k in MODEL_FIELDS if data.get(k) is not None}
    for required in MODEL_REQUIRED:
        if required not in kwargs:
            raise SpecError(f"model.{required}", "is required")
    try:
        return ModelSpec(**kwargs)
    except SpecError:
        raise
    except ValueError as bad:
        raise SpecError("model", str(bad)) from None


def cluster_spec_on_gpu(data: dict[str, Any], gpu: GpuSpec) -> ClusterSpec:
    """A ClusterSpec from a catalog cluster or an inline API ClusterSpec whose GPU is ``gpu``
    (``data['gpu']`` is not read)."""
    try:
        optional = {
            target: float(data[key]) * scale for key, target, scale in CLUSTER_OPTIONAL if data.get(key) is not None
        }
        return ClusterSpec(
            name=str(data.get("name", "inline")),
            gpu=gpu,
            gpus_per_node=data["gpus_per_node"],
            num_nodes=data["num_nodes"],
            intra_node_bytes_per_s=float(data["intra_node_gbytes_per_s"]) * GB_BYTES,
            inter_node_bytes_per_s=float(data["inter_node_gbytes_per_s"]) * GB_BYTES,
            # GPUs one NVLink fabric joins; absent: the node (ClusterSpec's default).
            nvlink_domain_gpus=data.get("nvlink_domain_gpus"),
            # Data-parallel rings over every NIC of a domain, where measured; absent: one share.
            ring_nic_aggregation=False if data.get("ring_nic_aggregation") is None else data["ring_nic_aggregation"],
            **optional,  # type: ignore[arg-type]  # latencies and bus efficiencies, floats
        )
    except KeyError as missing:
        raise SpecError(f"cluster.{missing.args[0]}", "is required") from None
    except (TypeError, ValueError) as bad:
        if isinstance(bad, SpecError):
            raise
        raise SpecError("cluster", str(bad)) from None


def stack_training_facts(entry: dict[str, Any]) -> dict[str, Any]:
    """The TrainingSpec fields a stack entry sets (every one of STACK_FACTS)."""
    facts = entry["facts"]
    missing = [name for name in STACK_FACTS if name not in facts]
    if missing:
        raise SpecError("training.stack", f"stack {entry['name']!r} does not state {', '.join(missing)}")
    return {name: facts[name] for name in STACK_FACTS}
