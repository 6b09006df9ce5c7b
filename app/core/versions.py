"""Which solver answered: stored with every plan and part of its idempotency key."""

from __future__ import annotations

import hashlib
import os
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


def _solver_files() -> list[tuple[str, str]]:
    """(path below the solver package, POSIX form; path on disk) of every Python file of the
    package, sub-packages included, sorted by the first. Strings and os.walk rather than
    Path.rglob and Path.relative_to: current_versions, which every `partitura plan` runs, takes
    29 M instructions instead of 42 M (callgrind)."""
    root = os.path.dirname(solver.__file__)
    files: list[tuple[str, str]] = []
    for directory, _, names in os.walk(root):
        below = os.path.relpath(directory, root)
        prefix = "" if below == "." else below.replace(os.sep, "/") + "/"
        files += [(prefix + name, os.path.join(directory, name)) for name in names if name.endswith(".py")]
    return sorted(files)


def solver_sources() -> list[Path]:
    """Every Python file of the solver package, sub-packages included, in a stable order."""
    return [Path(path) for _, path in _solver_files()]


def current_versions() -> Versions:
    """The package version plus a digest of the solver's source files, so a changed cost model
    or optimizer never answers from a plan stored by the previous one."""
    digest = hashlib.sha256()
    for below, path in _solver_files():
        digest.update(below.encode())
        with open(path, "rb") as source:
            digest.update(source.read())
    return Versions(solver=f"{_installed('partitura')}+{digest.hexdigest()[:12]}", ortools=_installed("ortools"))
