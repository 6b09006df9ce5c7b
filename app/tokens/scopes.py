"""What a token may do. Scopes are ranked: each grants what the ones below it grant."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum


class Scope(str, Enum):
    READ = "read"  # GET: own plans, sweeps, profiles; the catalog
    PLAN = "plan"  # and POST / DELETE: plans, sweeps, sizing, evaluations, profiles, custom catalog entries
    ADMIN = "admin"  # and tokens (/v1/tokens); every owner's resources


RANK = {Scope.READ: 0, Scope.PLAN: 1, Scope.ADMIN: 2}


def grants(held: Iterable[Scope], needed: Scope) -> bool:
    """Whether a token holding ``held`` may do what ``needed`` allows."""
    return any(RANK[scope] >= RANK[needed] for scope in held)


def encode_scopes(scopes: Iterable[Scope]) -> str:
    """Space-separated, as OAuth 2.0 writes scopes, lowest first, each once."""
    return " ".join(scope.value for scope in sorted(set(scopes), key=RANK.__getitem__))


def decode_scopes(text: str) -> frozenset[Scope]:
    return frozenset(Scope(word) for word in text.split())
