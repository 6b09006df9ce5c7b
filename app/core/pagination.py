"""Opaque keyset cursors for newest-first listings: (created_at, id) of the last row served."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any

from sqlalchemy import Select, and_, or_

from app.core.problems import invalid_field


def encode_cursor(row: Any) -> str:
    """The cursor after ``row`` (any model with ``created_at`` and ``id``)."""
    raw = json.dumps({"created_at": row.created_at.isoformat(), "id": row.id}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """(created_at, id) from a cursor this service issued; anything else is a 422 on query.cursor."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        raw = json.loads(base64.urlsafe_b64decode(padded.encode()))
        created_at = datetime.fromisoformat(raw["created_at"])
        if created_at.tzinfo is None:
            raise ValueError("naive timestamp")
        return created_at, str(raw["id"])
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError):
        raise invalid_field("query.cursor", "is not a cursor this service issued") from None


def newest_first_after(query: Select, row_type: Any, after: tuple[datetime, str] | None, limit: int) -> Select:
    """``query`` ordered newest first (created_at, then id, descending), strictly after the
    cursor position ``after``, at most ``limit`` rows. ``row_type`` has ``created_at`` and ``id``."""
    if after is not None:
        created_at, row_id = after
        query = query.where(
            or_(row_type.created_at < created_at, and_(row_type.created_at == created_at, row_type.id < row_id))
        )
    return query.order_by(row_type.created_at.desc(), row_type.id.desc()).limit(limit)
