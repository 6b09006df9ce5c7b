"""Where the Alembic migrations are, and a digest of them, without importing Alembic (the CLI's
scratch database is keyed by the digest: a command that finds it cached never loads Alembic)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


class MigrationsNotFound(RuntimeError):
    """The migrations folder is not where the service looks for it."""


def migrations_dir(env: dict[str, str] | None = None) -> Path:
    """``PARTITURA_MIGRATIONS_DIR``, else ``migrations/`` beside the ``app`` package (a checkout),
    else ``./migrations`` (the Docker image's working directory)."""
    env = dict(os.environ) if env is None else env
    candidates = []
    if env.get("PARTITURA_MIGRATIONS_DIR"):
        candidates.append(Path(env["PARTITURA_MIGRATIONS_DIR"]))
    candidates.append(Path(__file__).resolve().parents[2] / "migrations")
    candidates.append(Path.cwd() / "migrations")
    for candidate in candidates:
        if (candidate / "env.py").is_file():
            return candidate
    raise MigrationsNotFound(f"no migrations folder among {', '.join(map(str, candidates))}")


def migrations_digest(directory: Path) -> str:
    """SHA-256 of every Python file of the migrations (names and contents): it changes with any
    migration added or edited."""
    digest = hashlib.sha256()
    for path in sorted(directory.rglob("*.py"), key=lambda p: p.relative_to(directory).as_posix()):
        digest.update(path.relative_to(directory).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()
