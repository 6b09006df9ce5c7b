"""Catalog names to solver specs: a lookup (``catalog.loader``) then a conversion
(``catalog.conversion``), including a cluster whose GPU is given by name."""

from __future__ import annotations

import functools
import json
from typing import Any

from catalog.conversion import cluster_spec_on_gpu, gpu_spec_from_dict, model_spec_from_dict, stack_training_facts
from catalog.loader import DATA_DIR, CatalogError, default_stack_name, get_entry
from solver.cost.uncertainty import ErrorBand
from solver.spec.errors import SpecError
from solver.spec.hardware import ClusterSpec, GpuSpec
from solver.spec.model import ModelSpec


def get_gpu(name: str) -> GpuSpec:
    return gpu_spec_from_dict(get_entry("gpus", name))


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
    return cluster_spec_on_gpu(data, gpu)


def get_cluster(name: str) -> ClusterSpec:
    return cluster_spec_from_dict(get_entry("clusters", name))


def get_stack_facts(name: str | None = None) -> dict[str, Any]:
    """The training facts of stack ``name`` (the default stack when None); CatalogError with close
    names for an unknown one."""
    return stack_training_facts(get_entry("stacks", name or default_stack_name()))


def gpu_generation(gpu_name: str) -> str:
    """'a100-sxm4-80gb' -> 'a100': the part, whatever its memory or form factor."""
    return gpu_name.split("-")[0]


def error_band_keys(stack: str, gpu_name: str, moe: bool = False) -> list[str]:
    """The error-band groups a prediction may take its band from, most specific first: its stack
    on its GPU generation, its stack, every measured run (data/error_bands.json). A mixture-of-
    experts model's prediction is judged by MoE runs alone (its stack on its generation, its
    stack, every MoE run) before every run: routing and token dispatch err in ways a dense
    layer does not (bench/error_bands.py), and a dense model's band should not carry them."""
    generation = gpu_generation(gpu_name)
    if moe:
        return [f"{stack}/{generation}/moe", f"{stack}/moe", "moe", "all"]
    return [f"{stack}/{generation}", stack, "all"]


@functools.lru_cache(maxsize=1)
def _error_bands() -> dict[str, dict[str, Any]]:
    return dict(json.loads((DATA_DIR / "error_bands.json").read_text())["bands"])


def error_band(stack: str, gpu_name: str, moe: bool = False) -> ErrorBand:
    """The band for predictions of ``stack`` on ``gpu_name``, of a mixture-of-experts model where
    ``moe`` (bench/error_bands.py builds them)."""
    bands = _error_bands()
    key = next(k for k in error_band_keys(stack, gpu_name, moe) if k in bands)
    band = bands[key]
    return ErrorBand(band["low_ratio"], band["high_ratio"], key, band["runs"])
