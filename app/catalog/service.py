"""The catalog as the API sees it: built-in entries plus custom models and clusters stored in the
database, and the resolution of a request's ``model`` / ``cluster`` against both
(``app.catalog.resolve`` with the database's ``SessionEntries``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

import catalog
from app.catalog import repository
from app.catalog import resolve as resolution
from app.catalog.models import CustomCluster, CustomModel
from app.catalog.resolve import SINGULAR, Kind, Resolved, builtin_names
from app.catalog.schemas import ClusterSpecIn, HfConfigIn, ModelSpecIn, entry_dict
from app.core.db import utc_now
from app.core.ownership import ANYONE, Access
from app.core.problems import Problem, from_spec_error, not_found
from catalog.hf_config import from_hf_config
from solver.spec.errors import SpecError

CUSTOM_TABLES: dict[str, type[CustomModel] | type[CustomCluster]] = {
    "models": CustomModel,
    "clusters": CustomCluster,
}


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


def _custom_entry(row: CustomModel | CustomCluster) -> dict[str, Any]:
    return {**entry_dict(row.spec, builtin=False), "created_at": row.created_at.isoformat()}


class SessionEntries:
    """The custom entries stored in the database, as ``app.catalog.resolve`` looks them up."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def find(self, kind: Kind, name: str) -> dict[str, Any] | None:
        if kind not in CUSTOM_TABLES:
            return None
        row = repository.get(self.session, CUSTOM_TABLES[kind], name)
        return _custom_entry(row) if row is not None else None

    def names(self, kind: Kind) -> list[str]:
        return repository.names(self.session, CUSTOM_TABLES[kind]) if kind in CUSTOM_TABLES else []


def all_names(session: Session, kind: Kind) -> list[str]:
    return resolution.all_names(SessionEntries(session), kind)


def list_entries(session: Session, kind: Kind) -> list[dict[str, Any]]:
    entries = [entry_dict(entry, builtin=True) for entry in catalog.list_entries(kind)]
    if kind in CUSTOM_TABLES:
        entries += [_custom_entry(row) for row in repository.list_all(session, CUSTOM_TABLES[kind])]
    return entries


def find_entry(session: Session, kind: Kind, name: str) -> dict[str, Any] | None:
    return resolution.find_entry(SessionEntries(session), kind, name)


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
    if name in builtin_names(kind):
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
    if name in builtin_names(kind):
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


def resolve(
    session: Session, model: str | ModelSpecIn, cluster: str | ClusterSpecIn, num_gpus: int | None = None
) -> Resolved:
    """``app.catalog.resolve.resolve`` with the database's custom entries."""
    return resolution.resolve(SessionEntries(session), model, cluster, num_gpus)


def convert_hf_config(body: HfConfigIn) -> dict[str, Any]:
    """The model a Hugging Face config.json describes, checked as an inline ModelSpec is; what the
    planner cannot represent is a 422 naming the config's field (``body.config.moe_layers``)."""
    try:
        converted = from_hf_config(body.config, name=body.name, seq_length=body.seq_length)
    except SpecError as error:
        raise from_spec_error(error, "body") from None
    try:  # the API's own bounds (at most 1024 layers, sizes up to 2**24), under the config's names
        model = ModelSpecIn.model_validate(converted.fields)
    except ValidationError as error:
        first = error.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        raise from_spec_error(SpecError(converted.keys.get(field, "config"), first["msg"]), "body") from None
    return {"model": model.model_dump(mode="json", exclude_none=True), "model_type": converted.model_type,
            "not_modelled": list(converted.not_modelled)}
