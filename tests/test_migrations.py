"""The Alembic migrations go up, down and up again on SQLite and Postgres, and match the models."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from app.core.db import make_engine
from app.core.migrate import current_revision, downgrade, head_revision, upgrade
from app.models import Base
from conftest import BACKENDS, empty_database

TABLES = set(Base.metadata.tables)


def test_the_service_tables_are_all_known():
    assert {"plans", "plan_candidates", "custom_models", "custom_clusters"} <= TABLES


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
def test_up_down_up(backend, tmp_path):
    with empty_database(backend, tmp_path) as url:
        upgrade(url)
        assert _tables(url) == TABLES
        downgrade(url, "base")
        assert _tables(url) == set()
        upgrade(url)
        assert _tables(url) == TABLES
        engine = make_engine(url)
        try:
            assert current_revision(engine) == head_revision()
            constraints = inspect(engine).get_unique_constraints("plans")
            assert {c["name"] for c in constraints} == {"uq_plans_request_hash"}
            foreign_keys = inspect(engine).get_foreign_keys("plan_candidates")
            assert [fk["name"] for fk in foreign_keys] == ["fk_plan_candidates_plan_id_plans"]
        finally:
            engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
def test_migrations_build_exactly_the_models_schema(backend, tmp_path):
    with empty_database(backend, tmp_path) as url:
        upgrade(url)
        engine = make_engine(url)
        try:
            with engine.connect() as connection:
                context = MigrationContext.configure(connection, opts={"compare_type": True})
                assert compare_metadata(context, Base.metadata) == []
        finally:
            engine.dispose()


def test_migration_files_are_date_stamped():
    from app.core.migrate import migrations_dir

    files = sorted(p.name for p in (migrations_dir() / "versions").glob("*.py"))
    assert files
    for name in files:
        stamp = name.split("-", 1)[0]
        year, month, day, hour_minute = stamp.split("_")
        assert (len(year), len(month), len(day), len(hour_minute)) == (4, 2, 2, 4), name
