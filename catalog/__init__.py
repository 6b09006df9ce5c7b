"""The built-in catalog: GPUs, node types, clusters and models as sourced data files.

Entries are plain dicts (what the API shows, sources included); ``*_spec_from_dict`` turn a
catalog entry or an inline API spec into the solver's dataclasses. Units are in the keys:
GiB and decimal GB/s at this edge, bytes and bytes/s inside the solver.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from solver.spec.errors import SpecError
from solver.spec.training import Precision
from solver.spec.hardware import ClusterSpec, GpuSpec
from solver.spec.model import ModelSpec

DATA_DIR = Path(__file__).parent / "data"
GIB_BYTES = 2**30
GB_BYTES = 10**9
TERA = 10**12
MICRO = 1e-6


class CatalogError(LookupError):
    """A name that is not in the catalog; ``suggestions`` holds close names."""

    def __init__(self, kind: str, name: str, suggestions: list[str]) -> None:
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        super().__init__(f"unknown {kind} {name!r}{hint}")
        self.kind = kind
        self.name = name
        self.suggestions = suggestions


def close_names(name: str, names: list[str]) -> list[str]:
    return difflib.get_close_matches(str(name).lower(), names, n=3, cutoff=0.5)


OVERRIDES_ENV = "PARTITURA_CATALOG_OVERRIDES"


def merge_gpu_overrides(gpus: dict[str, dict[str, Any]], overrides: dict[str, Any], origin: str) -> None:
    """Merge a calibration override document (``partitura calibrate`` output, keys as in
    gpus.json) into ``gpus``: fields of a known GPU are replaced and their sources kept beside
    the old ones; an unknown name must be a complete entry. Raises SpecError naming the field."""
    entries = overrides.get("gpus")
    if not isinstance(entries, list):
        raise SpecError(f"{origin}.gpus", "must be a list of GPU entries")
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise SpecError(f"{origin}.gpus[{index}].name", "is required")
        merged = copy.deepcopy(gpus.get(entry["name"], {}))
        sources = {**merged.get("sources", {}), **entry.get("sources", {})}
        merged.update(entry)
        merged["sources"] = sources
        gpu_spec_from_dict(merged, field=f"{origin}.gpus[{index}]")  # validate before use
        gpus[entry["name"]] = merged


@lru_cache(maxsize=1)
def _load() -> dict[str, dict[str, dict[str, Any]]]:
    def read(file: str, key: str) -> dict[str, dict[str, Any]]:
        entries = json.loads((DATA_DIR / file).read_text())[key]
        return {entry["name"]: entry for entry in entries}

    gpus = read("gpus.json", "gpus")
    # Calibration overrides, read once per process: PARTITURA_CATALOG_OVERRIDES=file[:file...].
    for path in filter(None, os.environ.get(OVERRIDES_ENV, "").split(os.pathsep)):
        merge_gpu_overrides(gpus, json.loads(Path(path).read_text()), origin=Path(path).name)
    nodes = read("nodes.json", "nodes")
    models = read("models.json", "models")
    clusters = {}
    for name, entry in read("clusters.json", "clusters").items():
        node = nodes[entry["node"]]
        cluster = {k: v for k, v in node.items() if k not in ("name", "display_name", "sources")}
        cluster.update(
            name=name,
            node=entry["node"],
            num_nodes=entry["num_nodes"],
            gpu_hour_price_usd=entry.get("gpu_hour_price_usd"),
            source=entry["source"],
            link_sources=node.get("sources", {}),
        )
        clusters[name] = cluster
    return {"gpus": gpus, "nodes": nodes, "models": models, "clusters": clusters}


def _entries(kind: str) -> dict[str, dict[str, Any]]:
    return _load()[kind]


def list_entries(kind: str) -> list[dict[str, Any]]:
    """All built-in entries of ``kind`` (gpus, nodes, models, clusters), as copies."""
    return [copy.deepcopy(e) for e in _entries(kind).values()]


def get_entry(kind: str, name: str) -> dict[str, Any]:
    entries = _entries(kind)
    if name not in entries:
        raise CatalogError(kind.rstrip("s"), name, close_names(name, list(entries)))
    return copy.deepcopy(entries[name])


def gpu_spec_from_dict(data: dict[str, Any], field: str = "gpu") -> GpuSpec:
    """A GpuSpec from a catalog entry or an inline API GPU spec (peak_tflops, memory_gib, ...)."""
    try:
        peaks = {Precision(k): float(v) * TERA for k, v in data["peak_tflops"].items()}
        effs = data.get("gemm_efficiency") or {k: 0.8 for k in data["peak_tflops"]}
        return GpuSpec(
            name=str(data["name"]),
            peak_flops_per_s=peaks,
            memory_bytes=int(float(data["memory_gib"]) * GIB_BYTES),
            hbm_bytes_per_s=float(data["hbm_gbytes_per_s"]) * GB_BYTES,
            gemm_efficiency={Precision(k): float(v) for k, v in effs.items()},
            hbm_efficiency=float(data.get("hbm_efficiency", 0.8)),
            num_sms=int(data.get("num_sms", 108)),
            **({"gemm_saturation_dim": float(data["gemm_saturation_dim"])} if data.get("gemm_saturation_dim") else {}),
        )
    except KeyError as missing:
        raise SpecError(f"{field}.{missing.args[0]}", "is required") from None
    except ValueError as bad:
        if isinstance(bad, SpecError):
            raise SpecError(f"{field}.{bad.field.split('.', 1)[-1]}", bad.reason) from None
        raise SpecError(field, str(bad)) from None


def get_gpu(name: str) -> GpuSpec:
    return gpu_spec_from_dict(get_entry("gpus", name))


MODEL_FIELDS = (
    "name", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size",
    "vocab_size", "seq_length", "mlp_activation", "tied_embeddings", "architecture", "position_embedding",
)


def model_spec_from_dict(data: dict[str, Any]) -> ModelSpec:
    """A ModelSpec from a catalog entry or an inline API ModelSpec."""
    kwargs = {k: data[k] for k in MODEL_FIELDS if data.get(k) is not None}
    for required in ("name", "num_layers", "hidden_size", "num_attention_heads", "vocab_size", "seq_length"):
        if required not in kwargs:
            raise SpecError(f"model.{required}", "is required")
    try:
        return ModelSpec(**kwargs)
    except SpecError:
        raise
    except ValueError as bad:
        raise SpecError("model", str(bad)) from None


def get_model(name: str) -> ModelSpec:
    return model_spec_from_dict(get_entry("models", name))


def cluster_spec_from_dict(data: dict[str, Any], gpu: GpuSpec | None = None) -> ClusterSpec:
    """A ClusterSpec from a catalog cluster or an inline API ClusterSpec.

    ``gpu`` may be given already resolved (e.g. a custom GPU); otherwise ``data['gpu']`` is a
    catalog GPU name or an inline GPU spec.
    """
    if gpu is None:
        raw_gpu = data.get("gpu")
        if raw_gpu is None:
            raise SpecError("cluster.gpu", "is required")
        if isinstance(raw_gpu, str):
            try:
                gpu = get_gpu(raw_gpu)
            except CatalogError as err:
                hint = f"; did you mean {', '.join(err.suggestions)}?" if err.suggestions else ""
                raise SpecError("cluster.gpu", f"unknown GPU {raw_gpu!r}{hint}") from None
        else:
            gpu = gpu_spec_from_dict(raw_gpu, field="cluster.gpu")
    try:
        optional = {}
        for key, target, scale in (
            ("intra_node_latency_us", "intra_node_latency_s", MICRO),
            ("inter_node_latency_us", "inter_node_latency_s", MICRO),
            ("intra_node_bus_efficiency", "intra_node_bus_efficiency", 1.0),
            ("inter_node_bus_efficiency", "inter_node_bus_efficiency", 1.0),
            ("gpu_hour_price_usd", "gpu_hour_price_usd", 1.0),
        ):
            if data.get(key) is not None:
                optional[target] = float(data[key]) * scale
        return ClusterSpec(
            name=str(data.get("name", "inline")),
            gpu=gpu,
            gpus_per_node=data["gpus_per_node"],
            num_nodes=data["num_nodes"],
            intra_node_bytes_per_s=float(data["intra_node_gbytes_per_s"]) * GB_BYTES,
            inter_node_bytes_per_s=float(data["inter_node_gbytes_per_s"]) * GB_BYTES,
            **optional,
        )
    except KeyError as missing:
        raise SpecError(f"cluster.{missing.args[0]}", "is required") from None
    except (TypeError, ValueError) as bad:
        if isinstance(bad, SpecError):
            raise
        raise SpecError("cluster", str(bad)) from None


def get_cluster(name: str) -> ClusterSpec:
    return cluster_spec_from_dict(get_entry("clusters", name))
