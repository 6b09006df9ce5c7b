"""A request's ``model`` and ``cluster`` (a name or an inline spec) resolved into solver specs,
with the catalog entries they came from. Names are looked up in the built-in catalog, then in a
set of custom entries (``CustomEntries``): the database's (``app.catalog.service``), or none
(``NO_CUSTOM_ENTRIES``: the command line without a database). Free of SQLAlchemy and FastAPI, so
a command that plans without a database does not load them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

import catalog
from app.catalog.schemas import ClusterSpecIn, ModelSpecIn, entry_dict
from app.core.problems import from_spec_error, invalid_field
from solver.spec.errors import SpecError
from solver.spec.hardware import ClusterSpec
from solver.spec.model import ModelSpec

Kind = Literal["gpus", "models", "clusters", "nodes"]
SINGULAR = {"gpus": "GPU", "models": "model", "clusters": "cluster", "nodes": "node type"}


class CustomEntries(Protocol):
    """Custom models and clusters beside the built-in catalog."""

    def find(self, kind: Kind, name: str) -> dict[str, Any] | None:
        """The custom entry (its ``entry_dict``) named ``name``, or None."""

    def names(self, kind: Kind) -> list[str]:
        """Every custom entry's name, for suggestions."""


class _NoCustomEntries:
    def find(self, kind: Kind, name: str) -> dict[str, Any] | None:
        return None

    def names(self, kind: Kind) -> list[str]:
        return []


NO_CUSTOM_ENTRIES: CustomEntries = _NoCustomEntries()


def builtin_names(kind: Kind) -> list[str]:
    return [entry["name"] for entry in catalog.list_entries(kind)]


def all_names(custom: CustomEntries, kind: Kind) -> list[str]:
    return builtin_names(kind) + custom.names(kind)


def find_entry(custom: CustomEntries, kind: Kind, name: str) -> dict[str, Any] | None:
    """The built-in entry named ``name``, else the custom one, else None."""
    try:
        return entry_dict(catalog.get_entry(kind, name), builtin=True)
    except catalog.CatalogError:
        pass
    return custom.find(kind, name)


@dataclass(frozen=True)
class Resolved:
    """Solver specs for a request, and the catalog entries they came from (the plan's snapshot)."""

    model: ModelSpec
    cluster: ClusterSpec
    snapshot: dict[str, Any]


def _named_entry(custom: CustomEntries, kind: Kind, name: str, field_path: str) -> tuple[dict[str, Any], str]:
    entry = find_entry(custom, kind, name)
    if entry is None:
        # A cluster may be named by a node type too (``_cluster_entry``), so those are suggested.
        known = all_names(custom, kind) + (builtin_names("nodes") if kind == "clusters" else [])
        suggestions = catalog.close_names(name, known)
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        raise invalid_field(field_path, f"unknown {SINGULAR[kind]} {name!r}{hint}", suggestions)
    entry.pop("created_at", None)  # the snapshot is the spec; when it was added is not part of it
    return entry, ("builtin" if entry.pop("builtin") else "custom")


def _cluster_entry(custom: CustomEntries, name: str, num_gpus: int | None) -> tuple[dict[str, Any], str]:
    """A named cluster (built in, then custom), else a node type sized to ``num_gpus``."""
    if find_entry(custom, "clusters", name) is None and name in builtin_names("nodes"):
        return catalog.node_cluster_entry(name, num_gpus), "builtin"
    return _named_entry(custom, "clusters", name, "body.cluster")


def resolve(
    custom: CustomEntries, model: str | ModelSpecIn, cluster: str | ClusterSpecIn, num_gpus: int | None = None
) -> Resolved:
    """Names are looked up in the built-in catalog, then among ``custom`` entries; inline specs are
    used as given. A cluster may also be named by a node type: then it has as many nodes as
    ``num_gpus`` needs (one without it). Errors name the request field (``body.model``,
    ``body.cluster.gpu``)."""
    if isinstance(model, str):
        model_entry, model_source = _named_entry(custom, "models", model, "body.model")
    else:
        model_entry, model_source = model.model_dump(mode="json", exclude_none=True), "inline"
    if isinstance(cluster, str):
        cluster_entry, cluster_source = _cluster_entry(custom, cluster, num_gpus)
    else:
        cluster_entry, cluster_source = cluster.model_dump(mode="json", exclude_none=True), "inline"
    gpu_ref = cluster_entry.get("gpu")
    if isinstance(gpu_ref, str):
        try:
            gpu_entry, gpu_source = catalog.get_entry("gpus", gpu_ref), "builtin"
        except catalog.CatalogError as error:
            field_path = "body.cluster.gpu" if cluster_source == "inline" else "body.cluster"
            raise invalid_field(field_path, str(error), error.suggestions) from None
    else:
        gpu_entry, gpu_source = gpu_ref, cluster_source
    try:
        model_spec = catalog.model_spec_from_dict(model_entry)
        cluster_spec = catalog.cluster_spec_from_dict(cluster_entry)
    except SpecError as error:
        raise from_spec_error(error, "body") from None
    snapshot = {
        "model": {"source": model_source, "entry": model_entry},
        "cluster": {"source": cluster_source, "entry": cluster_entry},
        "gpu": {"source": gpu_source, "entry": gpu_entry},
    }
    return Resolved(model_spec, cluster_spec, snapshot)
