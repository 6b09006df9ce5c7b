"""Profiles: validate and store documents, read and list them, and hand them to the planner.

Plan and evaluation requests that name ``profile_id`` get the measured profile from
``measured_profile``; the solver derives the values it needs at other tp_size / micro-batch sizes
from it (``solver.cost.derive.derive_profile``) and reports each layer's origin.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.orm import Session

from app.core.db import utc_now
from app.core.ownership import ANYONE, Access
from app.core.pagination import decode_cursor, encode_cursor
from app.core.problems import Problem, from_spec_error, invalid_field, not_found
from app.profiles import repository
from app.profiles.models import Profile
from solver.io.profile_format import ProfileDocument, parse_profile_document, profile_document
from solver.spec.errors import SpecError
from solver.spec.model import ModelSpec

MAX_PAGE_SIZE = 100


def _summary(profile: Profile) -> dict[str, Any]:
    layers = profile.document.get("layers", [])
    return {
        "id": profile.id,
        "created_at": profile.created_at,
        "model_name": profile.model_name,
        "device": profile.device,
        "precision": profile.precision,
        "micro_batch_size": profile.micro_batch_size,
        "seq_length": profile.seq_length,
        "tp_size": profile.tp_size,
        "num_layers": sum(1 for layer in layers if layer.get("kind") == "transformer"),
    }


def _full(profile: Profile) -> dict[str, Any]:
    return {**_summary(profile), "document": profile.document}


def validate(raw: Any) -> ProfileDocument:
    """The document as solver types; a bad field is a 422 naming ``body.<field>``."""
    try:
        return parse_profile_document(raw)
    except SpecError as error:
        raise from_spec_error(error, "body") from None


def create_profile(session: Session, raw: Any, access: Access = ANYONE) -> dict[str, Any]:
    """Validate and store a document, owned by ``access.owner``; returns the stored profile
    (normalised document)."""
    document = validate(raw)
    profile = document.profile
    row = Profile(
        id=str(uuid.uuid4()),
        created_at=utc_now(),
        model_name=document.model.name,
        device=profile.device,
        precision=profile.precision.value,
        micro_batch_size=profile.micro_batch_size,
        seq_length=profile.seq_length,
        tp_size=profile.tp_size,
        document=profile_document(document),
        owner_token_id=access.owner,
    )
    repository.add(session, row)
    return _full(row)


def _unknown(profile_id: str) -> Problem:
    return not_found("profile", profile_id)  # opaque ids: no suggestions


def get_profile(session: Session, profile_id: str, access: Access = ANYONE) -> dict[str, Any]:
    row = repository.get(session, profile_id, access)
    if row is None:
        raise _unknown(profile_id)
    return _full(row)


def delete_profile(session: Session, profile_id: str, access: Access = ANYONE) -> None:
    row = repository.get(session, profile_id, access)
    if row is None:
        raise _unknown(profile_id)
    repository.delete(session, row)


def list_profiles(
    session: Session, limit: int, cursor: str | None, model: str | None, access: Access = ANYONE
) -> dict[str, Any]:
    after = decode_cursor(cursor) if cursor else None
    rows = repository.page(session, limit + 1, after, model=model, access=access)
    page, more = rows[:limit], len(rows) > limit
    return {"items": [_summary(row) for row in page], "next_cursor": encode_cursor(page[-1]) if more else None}


# Shape fields a profile's model must share with the planned model (the name may differ: a custom
# entry and a catalog entry can describe the same network).
SHAPE_FIELDS = (
    "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size",
    "mlp_activation", "architecture", "position_embedding",
)


def measured_profile(
    session: Session, profile_id: str, model: ModelSpec, field: str = "body.profile_id", access: Access = ANYONE
) -> ProfileDocument:
    """The stored profile ``profile_id`` (one ``access`` may see) for planning ``model``.

    A 422 naming ``field`` when no such profile exists (or it is another owner's) or it was
    measured for a model of another shape (its layers would not describe this model's layers).
    """
    row = repository.get(session, profile_id, access)
    if row is None:
        raise invalid_field(field, f"no profile with id {profile_id!r}")  # opaque ids: no suggestions
    document = parse_profile_document(row.document)
    for name in SHAPE_FIELDS:
        measured, planned = getattr(document.model, name), getattr(model, name)
        if measured != planned:
            measured = getattr(measured, "value", measured)
            planned = getattr(planned, "value", planned)
            raise invalid_field(
                field,
                f"profile {profile_id} was measured for {document.model.name!r} with {name}={measured}, "
                f"the request's model {model.name!r} has {name}={planned}",
            )
    return document
