"""Database plumbing: declarative base with a constraint naming convention, engine and sessions.

SQLite is the default (a file next to the service); Postgres is used through
``DATABASE_URL=postgresql+psycopg://...``. The schema is owned by the Alembic migrations in
``migrations/``; nothing here creates tables.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import JSON, DateTime, Engine, MetaData, create_engine, event
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, sessionmaker
from sqlalchemy.pool import NullPool
from sqlalchemy.types import TypeDecorator

from app.core import db_deadlines
from app.core.config import DEFAULT_DATABASE_TIMEOUT_S

# Stable, predictable constraint names so that migrations can address them on every backend
# (https://alembic.sqlalchemy.org/en/latest/naming.html).
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# Seconds a SQLite connection waits for another writer before giving up.
SQLITE_BUSY_TIMEOUT_S = 30.0
# A statement may run this many times that long before Postgres cancels it.
STATEMENT_TIMEOUT_FACTOR = 6

# JSON on SQLite, JSONB on Postgres.
JsonDocument = JSON().with_variant(JSONB(), "postgresql")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UtcDateTime(TypeDecorator):
    """A timezone-aware UTC timestamp on every backend (SQLite stores it naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("timestamps must be timezone-aware")
        value = value.astimezone(timezone.utc)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def strict_json(value: Any) -> str:
    """JSON for the database's JSON columns: NaN and Infinity are refused (ValueError) before a
    row is written, on every backend. (SQLite stored them as the words NaN and Infinity, which
    are not JSON; Postgres's JSONB rejects them only after the round trip.)"""
    return json.dumps(value, allow_nan=False)


def make_engine(database_url: str, timeout_s: float = DEFAULT_DATABASE_TIMEOUT_S) -> Engine:
    """An engine for ``database_url``, writing JSON that never carries NaN or Infinity; SQLite
    gets foreign keys and serialised write transactions, Postgres a connect timeout, a pool
    timeout and a statement timeout (``timeout_s``), and a deadline of its own on every call
    (``app.core.db_deadlines``)."""
    if database_url.startswith("sqlite"):
        engine = create_engine(
            database_url,
            json_serializer=strict_json,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False},
        )
        _configure_sqlite(engine)
        return engine
    engine = create_engine(
        database_url,
        json_serializer=strict_json,
        pool_pre_ping=True,
        pool_timeout=timeout_s,
        connect_args=postgres_connect_args(timeout_s),
    )
    db_deadlines.install(engine, client_deadline_s(timeout_s))
    return engine


def postgres_connect_args(timeout_s: float) -> dict[str, Any]:
    """libpq parameters of the service's Postgres connections (its engine's and the job
    queue's): a connect timeout of ``timeout_s`` (libpq's least is 2 s) and a server-side
    statement timeout of STATEMENT_TIMEOUT_FACTOR x ``timeout_s``."""
    return {
        "connect_timeout": max(2, math.ceil(timeout_s)),
        "options": f"-c statement_timeout={int(STATEMENT_TIMEOUT_FACTOR * timeout_s * 1000)}",
    }


def client_deadline_s(timeout_s: float) -> float:
    """The deadline the client keeps on every call of those connections: the server's statement
    timeout, then one database timeout more, so a server that stops answering on a pooled
    connection cannot hold a request for good, and a live one always answers or cancels first."""
    return (STATEMENT_TIMEOUT_FACTOR + 1) * timeout_s


def make_probe_engine(database_url: str, timeout_s: float = DEFAULT_DATABASE_TIMEOUT_S) -> Engine:
    """An engine for the health probes (``app.health.probe``): no pool, so every probe opens a
    fresh connection (a pooled one may be stuck on a database that stopped answering), with
    ``timeout_s`` to connect and to run a statement; SQLite reads without taking the write lock."""
    if database_url.startswith("sqlite"):
        return create_engine(
            database_url, poolclass=NullPool, connect_args={"timeout": timeout_s, "check_same_thread": False}
        )
    engine = create_engine(
        database_url,
        poolclass=NullPool,
        connect_args={
            "connect_timeout": max(2, math.ceil(timeout_s)),
            "options": f"-c statement_timeout={max(1, int(timeout_s * 1000))}",
        },
    )
    db_deadlines.install(engine, 2 * timeout_s)  # a probe left waiting ends too, and its thread
    return engine


def _configure_sqlite(engine: Engine) -> None:
    """Foreign keys on, and every transaction opened with BEGIN IMMEDIATE.

    pysqlite's own transaction handling starts transactions late and can deadlock two writers
    that both read first; taking the write lock at BEGIN makes concurrent writers queue on the
    busy timeout instead (the recipe in SQLAlchemy's SQLite dialect documentation).
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def make_sessionmaker(engine: Engine) -> sessionmaker:
    return sessionmaker(bind=engine, expire_on_commit=False, autoflush=False)
