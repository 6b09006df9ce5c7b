"""Errors as RFC 9457 problem documents (``application/problem+json``).

Every error the service answers has ``type``, ``title``, ``status`` and ``detail``; a 422 adds
``errors``: one ``{"field", "reason"}`` per bad field, the field a dotted path from the request
(``body.model.hidden_size``, ``query.limit``); a 404 adds ``suggestions`` (close names).

This module is the documents alone, free of FastAPI and SQLAlchemy, so the command line and the
solver-side services raise them without loading the web stack; ``app.core.problem_handlers``
answers them over HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from solver.spec.errors import SpecError

PROBLEM_MEDIA_TYPE = "application/problem+json"
PROBLEM_TYPE_BASE = "urn:partitura:problem:"

# What a problem document quotes back is clipped: a 10 MB value in a request must not come back
# doubled in the error. Enough for any real field path, reason or name.
DETAIL_MAX_CHARS = 1000
REASON_MAX_CHARS = 500
FIELD_MAX_CHARS = 200
ERRORS_MAX = 50


def clip(text: Any, limit_chars: int) -> str:
    """``text`` as a string of at most ``limit_chars`` characters (an ellipsis marks a cut)."""
    text = str(text)
    return text if len(text) <= limit_chars else text[: limit_chars - 1] + "…"


@dataclass(eq=False)
class Problem(Exception):
    """An error answer; raise it anywhere below a router."""

    status: int
    title: str
    detail: str
    slug: str = "about:blank"
    errors: list[dict[str, str]] = field(default_factory=list)
    suggestions: list[str] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, instance: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": self.slug if self.slug == "about:blank" else PROBLEM_TYPE_BASE + self.slug,
            "title": self.title,
            "status": self.status,
            "detail": clip(self.detail, DETAIL_MAX_CHARS),
        }
        if instance:
            body["instance"] = clip(instance, FIELD_MAX_CHARS)
        if self.errors:
            body["errors"] = [
                {"field": clip(e["field"], FIELD_MAX_CHARS), "reason": clip(e["reason"], REASON_MAX_CHARS)}
                for e in self.errors[:ERRORS_MAX]
            ]
        if self.suggestions is not None:
            body["suggestions"] = [clip(s, FIELD_MAX_CHARS) for s in self.suggestions]
        body.update(self.extra)
        return body


def invalid_field(field_path: str, reason: str, suggestions: list[str] | None = None) -> Problem:
    """A 422 naming one field."""
    return Problem(
        status=422,
        title="Invalid request",
        detail=f"{field_path}: {reason}",
        slug="invalid-request",
        errors=[{"field": field_path, "reason": reason}],
        suggestions=suggestions,
    )


def from_spec_error(error: SpecError, prefix: str) -> Problem:
    """A solver ``SpecError`` (``model.hidden_size``) as a 422 naming ``prefix.model.hidden_size``."""
    return invalid_field(f"{prefix}.{error.field}" if prefix else error.field, error.reason)


def not_found(kind: str, name: str, suggestions: list[str] | None = None) -> Problem:
    hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
    return Problem(
        status=404,
        title=f"Unknown {kind}",
        detail=f"no {kind} named {clip(repr(name), FIELD_MAX_CHARS)}{hint}",
        slug="not-found",
        suggestions=list(suggestions or []),
    )


# Pydantic adds the union member's name to an error's location (``model.ModelSpecIn.hidden_size``);
# these are not fields of the request and are dropped from the reported path.
def _is_union_tag(part: Any) -> bool:
    if not isinstance(part, str):
        return False
    return part in {"str", "int", "float", "bool", "list[int]", "list[str]", "list[bool]"} or (
        part[:1].isupper() or "[" in part or part.startswith("constrained-")
    )


def _dotted(path: tuple[str | int, ...]) -> str:
    """``("body", "layers", 2, "forward_s")`` as ``body.layers[2].forward_s``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def validation_errors(raw_errors: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Pydantic's errors as ``{"field", "reason"}``, one per field, most specific first.

    For a value that may be a name or an inline spec, a dict that fails as a spec should not
    also be told that it is not a string: errors of a shallower alternative are dropped when a
    deeper one exists under the same field.
    """
    entries: list[tuple[tuple[str | int, ...], str, bool]] = []
    for error in raw_errors:
        loc = tuple(error.get("loc", ()))
        tagged = any(_is_union_tag(p) for p in loc[1:])
        path = tuple(p for i, p in enumerate(loc) if i == 0 or not _is_union_tag(p))
        reason = str(error.get("msg", "is invalid"))
        if error.get("type") == "json_invalid":
            position = loc[1] if len(loc) > 1 else "?"
            path = loc[:1]
            reason = f"is not valid JSON (error at character {position}: {error.get('ctx', {}).get('error', 'invalid')})"
        elif error.get("type") == "missing":
            reason = "is required"
        elif error.get("type") == "extra_forbidden":
            reason = "is not a known field"
        elif reason.startswith("Value error, "):
            reason = reason[len("Value error, ") :]
        entries.append((path, reason, tagged))
    kept: list[dict[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for path, reason, tagged in entries:
        deeper = any(other[: len(path)] == path and len(other) > len(path) for other, _, _ in entries)
        if tagged and deeper:
            continue
        key = (_dotted(path), reason)
        if key not in seen:
            seen.add(key)
            kept.append({"field": key[0], "reason": reason})
    return kept


def unreadable_body(cause: BaseException | None) -> Problem | None:
    """The 422 for a body the JSON parser fails on other than by a syntax error, or None.

    FastAPI answers a syntax error as a validation error (``json_invalid``, a 422 naming
    ``body``) but any other failure of the parser as a bare 400 that names nothing: bytes that
    are not UTF-8 text (JSON between systems is UTF-8, RFC 8259 section 8.1), arrays and
    objects nested deeper than the parser recurses, or an integer of more digits than Python
    converts. Those bodies are as unreadable as a syntax error, so they get the same answer (the
    service never answers 400)."""
    if isinstance(cause, UnicodeDecodeError):
        return invalid_field("body", f"is not valid JSON (not UTF-8 text: {cause.reason} at byte {cause.start})")
    if isinstance(cause, RecursionError):
        return invalid_field("body", "nests arrays or objects deeper than the service reads")
    if isinstance(cause, ValueError) and "digits" in str(cause):
        # Python's int conversion limit (sys.get_int_max_str_digits, 4300 by default).
        return invalid_field("body", "has a number with more digits than the service reads")
    if cause is not None:
        return invalid_field("body", f"is not valid JSON (it could not be read: {type(cause).__name__})")
    return None
