"""Apply and inspect the Alembic migrations in ``migrations/`` for a database URL."""

from __future__ import annotations

import os
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine


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


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # '%' is ConfigParser's interpolation character; URLs may contain it (escaped passwords).
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str) -> None:
    command.downgrade(alembic_config(database_url), revision)


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()
