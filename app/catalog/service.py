"""The catalog as the API sees it: built-in entries plus custom models and clusters, and the
resolution of a request's ``model`` / ``cluster`` (a name or an inline spec) into solver specs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

import catalog
from app.catalog import repository
from app.catalog.models import CustomCluster, CustomModel
from app.catalog.schemas import ClusterSpecIn, ModelSpecIn, entry_dict
from app.core.db import utc_now
from app.core.ownership import ANYONE, Access
from app.core.problems import Problem, from_spec_error, invalid_field, not_found
from solver.spec.errors import SpecError
from solver.spec.hardware import ClusterSpec
from solver.spec.model import ModelSpec

Kind = Literal["gpus", "models", "clusters"]
CUSTOM_TABLES: dict[str, type[CustomModel] | type[CustomCluster]] = {
    "models": CustomModel,
    "clusters": CustomCluster,
}
SINGULAR = {"gpus": "GPU", "models": "model", "clusters": "cluster"}


def _stack_entry(entry: dict[str, Any]) -> dict[str, Any]:
    return {**entry_dict(entry, builtin=True), "default": entry["name"] == catalog.default_stack_name()}


def list_stacks() -> list[dict[str, Any]]:
    return [_stack_entry(entry) for entry in catalog.list_entries("stacks")]


def get_stack(name: str) -> dict[str, Any]:
    try:
        return _stack_entry(catalog.get_entry("stacks", name))
    except catalog.CatalogError as error:
        # Few stacks exist: with no close name, every one is a suggestion.
        raise not_found("stack", name, error.suggestions or [e["name"] for e in catalog.list_entries("stacks")]) from None


def _builtin_names(kind: Kind) -> list[str]:
    return [entry["name"] for entry in catalog.list_entries(kind)]


def _custom_entry(row: CustomModel | CustomCluster) -> dict[str, Any]:
    return {**entry_dict(row.spec, builtin=False), "created_at": row.created_at.isoformat()}


def all_names(session: Session, kind: Kind) -> list[str]:
    names = _builtin_names(kind)
    if kind in CUSTOM_TABLES:
        names += repository.names(session, CUSTOM_TABLES[kind])
    return names


def list_entries(session: Session, kind: Kind) -> list[dict[str, Any]]:
    entries = [entry_dict(entry, builtin=True) for entry in catalog.list_entries(kind)]
    if kind in CUSTOM_TABLES:
        entries += [_custom_entry(row) for row in repository.list_all(session, CUSTOM_TABLES[kind])]
    return entries


def find_entry(session: Session, kind: Kind, name: str) -> dict[str, Any] | None:
    try:
        return entry_dict(catalog.get_entry(kind, name), builtin=True)
    except catalog.CatalogError:
        pass
    if kind in CUSTOM_TABLES:
        row = repository.get(session, CUSTOM_TABLES[kind], name)
        if row is not None:
            return _custom_entry(row)
    return None


def get_entry(session: Session, kind: Kind, name: str) -> dict[str, Any]:
    entry = find_entry(session, kind, name)
    if entry is None:
        raise not_found(SINGULAR[kind], name, catalog.close_names(name, all_names(session, kind)))
    return entry


def _check_spec(kind: Kind, spec: dict[str, Any]) -> None:
    """Build the solver spec once so that a custom entry is known to be usable when stored."""
    try:
        if kind == "models":
            catalog.model_spec_from_dict(spec)
        else:
            catalog.cluster_spec_from_dict(spec)
    except SpecError as error:
        # The body is the spec itself: "model.hidden_size" is "body.hidden_size" here.
        inner = error.field.split(".", 1)[1] if "." in error.field else ""
        raise from_spec_error(SpecError(inner, error.reason) if inner else error, "body") from None


def create_custom(
    session: Session, kind: Literal["models", "clusters"], body: BaseModel, access: Access = ANYONE
) -> dict[str, Any]:
    """Store a custom entry owned by ``access.owner``. Custom entries are one catalog shared by
    every caller (names are unique across owners, and any plan may name them)."""
    spec = body.model_dump(mode="json", exclude_none=True)
    name = spec["name"]
    if name in _builtin_names(kind):
        raise Problem(409, "Name taken", f"{name!r} is a built-in {SINGULAR[kind]}", slug="conflict")
    _check_spec(kind, spec)
    try:
        row = repository.add(session, CUSTOM_TABLES[kind], name, spec, utc_now(), access.owner)
    except IntegrityError:
        session.rollback()
        raise Problem(409, "Name taken", f"a custom {SINGULAR[kind]} named {name!r} exists", slug="conflict") from None
    return _custom_entry(row)


def delete_custom(session: Session, kind: Literal["models", "clusters"], name: str, access: Access = ANYONE) -> None:
    """Delete a custom entry: only its owner (or an admin) may; the catalog is shared, so the
    entry's existence is no secret and another owner's entry is a 403, not a 404."""
    if name in _builtin_names(kind):
        raise Problem(
            403, "Read-only entry", f"{name!r} is a built-in {SINGULAR[kind]}; built-ins cannot be deleted",
            slug="read-only",
        )
    row = repository.get(session, CUSTOM_TABLES[kind], name)
    if row is None:
        raise not_found(SINGULAR[kind], name, catalog.close_names(name, all_names(session, kind)))
    if not access.can_see(row.owner_token_id):
        raise Problem(
            403, "Owned by another token", f"the custom {SINGULAR[kind]} {name!r} was added by another token; "
            "only it or an admin may delete it", slug="not-owner",
        )
    repository.delete(session, row)


@dataclass(frozen=True)
class Resolved:
    """Solver specs for a request, and the catalog entries they came from (the plan's snapshot)."""

    model: ModelSpec
    cluster: ClusterSpec
    snapshot: dict[str, Any]


def _named_entry(session: Session, kind: Kind, name: str, field_path: str) -> tuple[dict[str, Any], str]:
    entry = find_entry(session, kind, name)
    if entry is None:
        suggestions = catalog.close_names(name, all_names(session, kind))
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        raise invalid_field(field_path, f"unknown {SINGULAR[kind]} {name!r}{hint}", suggestions)
    entry.pop("created_at", None)  # the snapshot is the spec; when it was added is not part of it
    return entry, ("builtin" if entry.pop("builtin") else "custom")


def _cluster_entry(session: Session, name: str, num_gpus: int | None) -> tuple[dict[str, Any], str]:
    """A named cluster (built in, then custom), else a node type sized to ``num_gpus``."""
    if find_entry(session, "clusters", name) is None and name in {n["name"] for n in catalog.list_entries("nodes")}:
        return catalog.node_cluster_entry(name, num_gpus), "builtin"
    return _named_entry(session, "clusters", name, "body.cluster")


def resolve(
    session: Session, model: str | ModelSpecIn, cluster: str | ClusterSpecIn, num_gpus: int | None = None
) -> Resolved:
    """Names are looked up in the built-in catalog, then among custom entries; inline specs are
    used as given. A cluster may also be named by a node type: then it has as many nodes as
    ``num_gpus`` needs (one without it). Errors name the request field (``body.model``,
    ``body.cluster.gpu``)."""
    if isinstance(model, str):
        model_entry, model_source = _named_entry(session, "models", model, "body.model")
    else:
        model_entry, model_source = model.model_dump(mode="json", exclude_none=True), "inline"
    if isinstance(cluster, str):
        cluster_entry, cluster_source = _cluster_entry(session, cluster, num_gpus)
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
