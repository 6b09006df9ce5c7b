"""Reading the built-in catalog: data/*.json, calibration overrides over the GPUs, lookups by name.

Entries are plain dicts, as the API shows them (sources included); ``catalog.conversion`` turns
them into solver specs.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from catalog.conversion import gpu_spec_from_dict
from solver.spec.errors import SpecError

DATA_DIR = Path(__file__).parent / "data"
OVERRIDES_ENV = "PARTITURA_CATALOG_OVERRIDES"  # calibration files, os.pathsep-separated


class CatalogError(LookupError):
    """A name that is not in the catalog; ``suggestions`` holds close names."""

    def __init__(self, kind: str, name: str, suggestions: list[str]) -> None:
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        super().__init__(f"unknown {kind} {name!r}{hint}")
        self.kind = kind
        self.name = name
        self.suggestions = suggestions


def close_names(name: str, names: list[str]) -> list[str]:
    """Up to three of ``names`` close to ``name``, for a 'did you mean' hint."""
    return difflib.get_close_matches(str(name).lower(), names, n=3, cutoff=0.5)


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


def override_paths() -> tuple[str, ...]:
    """The calibration files named by PARTITURA_CATALOG_OVERRIDES now (file[:file...])."""
    return tuple(filter(None, os.environ.get(OVERRIDES_ENV, "").split(os.pathsep)))


def _read(file: str, key: str) -> dict[str, dict[str, Any]]:
    entries = json.loads((DATA_DIR / file).read_text())[key]
    return {entry["name"]: entry for entry in entries}


@lru_cache(maxsize=8)
def _load(overrides: tuple[str, ...]) -> dict[str, dict[str, dict[str, Any]]]:
    """Every built-in entry by kind and name, the GPUs with ``overrides`` merged over them in
    order. Cached per list of override files (their contents are read once per process)."""
    gpus = _read("gpus.json", "gpus")
    for path in overrides:
        merge_gpu_overrides(gpus, json.loads(Path(path).read_text()), origin=Path(path).name)
    nodes = _read("nodes.json", "nodes")
    models = _read("models.json", "models")
    clusters = {
        name: _cluster_of(nodes[entry["node"]], name, entry["num_nodes"], entry["source"], entry.get("gpu_hour_price_usd"))
        for name, entry in _read("clusters.json", "clusters").items()
    }
    stacks = _read("stacks.json", "stacks")
    return {"gpus": gpus, "nodes": nodes, "models": models, "clusters": clusters, "stacks": stacks}


def _cluster_of(node: dict[str, Any], name: str, num_nodes: int, source: str, price_usd: float | None) -> dict[str, Any]:
    """A cluster entry: ``num_nodes`` nodes of the node type ``node``."""
    cluster = {k: v for k, v in node.items() if k not in ("name", "display_name", "sources")}
    cluster.update(
        name=name,
        node=node["name"],
        num_nodes=num_nodes,
        gpu_hour_price_usd=price_usd,
        source=source,
        link_sources=node.get("sources", {}),
    )
    return cluster


def node_cluster_entry(node_name: str, num_gpus: int | None) -> dict[str, Any]:
    """A cluster of the node type ``node_name``, as many nodes as ``num_gpus`` needs (one node
    when no count is given): how people describe a cluster ("1024 GPUs of dgx-a100-80gb").

    Where an NVLink domain spans several hosts (a GB200 NVL72 rack of 18 four-GPU trays), the
    count is rounded up to whole domains instead: a rack is bought, wired and scheduled whole, so
    256 GPUs of gb200-nvl72 are 4 racks (288 GPUs). A plan for 256 of them uses 256, filling the
    racks in rank order (3 full racks and 40 GPUs of the fourth); its groups stay on NVLink as
    long as they fit in a rack. CatalogError with close names when no node type has that name."""
    node = get_entry("nodes", node_name)
    per_node = node["gpus_per_node"]
    per_domain = node.get("nvlink_domain_gpus") or per_node
    unit = max(per_node, per_domain)  # one divides the other (ClusterSpec checks it)
    units = max(1, -(-(num_gpus or unit) // unit))
    num_nodes = units * unit // per_node
    if unit > per_node:
        source = f"{units} NVLink domains of {per_domain} GPUs ({num_nodes} nodes) of the node type {node_name}"
    else:
        source = f"{num_nodes} nodes of the node type {node_name}"
    return _cluster_of(node, node_name, num_nodes, source, None)


def _entries(kind: str) -> dict[str, dict[str, Any]]:
    # The environment is read here, outside the cache, so a changed PARTITURA_CATALOG_OVERRIDES
    # takes effect at the next lookup.
    return _load(override_paths())[kind]


@lru_cache(maxsize=1)
def default_stack_name() -> str:
    """The stack a request that names none assumes (data/stacks.json "default")."""
    return str(json.loads((DATA_DIR / "stacks.json").read_text())["default"])


def list_entries(kind: str) -> list[dict[str, Any]]:
    """All built-in entries of ``kind`` (gpus, nodes, models, clusters, stacks), as copies."""
    return [copy.deepcopy(e) for e in _entries(kind).values()]


def get_entry(kind: str, name: str) -> dict[str, Any]:
    """The built-in entry ``name`` of ``kind``, as a copy; CatalogError with close names if none."""
    entries = _entries(kind)
    if name not in entries:
        raise CatalogError(kind.rstrip("s"), name, close_names(name, list(entries)))
    return copy.deepcopy(entries[name])
