"""The built-in catalog: GPUs, node types, clusters and models as sourced data files.

- ``catalog.loader``: reads ``data/*.json`` (GPUs with PARTITURA_CATALOG_OVERRIDES merged over
  them), lists entries, looks names up and suggests close ones for unknown names;
- ``catalog.conversion``: an entry dict (or an inline API spec) to the solver's GpuSpec,
  ClusterSpec and ModelSpec, converting GiB and decimal GB/s at this edge to bytes and bytes/s;
- ``catalog.specs``: catalog names to solver specs (a lookup, then a conversion), and a software
  stack's name to the training facts it sets.
"""

from catalog.conversion import gpu_spec_from_dict, model_spec_from_dict
from catalog.loader import (
    CatalogError,
    close_names,
    default_stack_name,
    get_entry,
    list_entries,
    merge_gpu_overrides,
    node_cluster_entry,
)
from catalog.specs import (
    cluster_spec_from_dict,
    error_band,
    error_band_keys,
    get_cluster,
    get_gpu,
    get_model,
    get_stack_facts,
    gpu_generation,
)

__all__ = [
    "CatalogError",
    "close_names",
    "default_stack_name",
    "error_band",
    "error_band_keys",
    "cluster_spec_from_dict",
    "get_cluster",
    "get_entry",
    "get_gpu",
    "get_model",
    "get_stack_facts",
    "gpu_generation",
    "gpu_spec_from_dict",
    "list_entries",
    "merge_gpu_overrides",
    "model_spec_from_dict",
    "node_cluster_entry",
]
