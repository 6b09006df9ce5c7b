"""Which solver answered: stored with every plan and part of its idempotency key."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import solver


@dataclass(frozen=True)
class Versions:
    solver: str
    ortools: str


def _installed(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "unknown"


def solver_sources() -> list[Path]:
    """Every Python file of the solver package, sub-packages included, in a stable order."""
    root = Path(solver.__file__).parent
    return sorted(root.rglob("*.py"), key=lambda path: path.relative_to(root).as_posix())


def current_versions() -> Versions:
    """The package version plus a digest of the solver's source files, so a changed cost model
    or optimizer never answers from a plan stored by the previous one."""
    digest = hashlib.sha256()
    root = Path(solver.__file__).parent
    for path in solver_sources():
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return Versions(solver=f"{_installed('partitura')}+{digest.hexdigest()[:12]}", ortools=_installed("ortools"))
