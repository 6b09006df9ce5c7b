"""API tokens, and the owner (the token that created it) of plans, sweeps, profiles and custom
catalog entries.

The owner columns are plain nullable columns (rows made with authentication off have none) and
carry no foreign key: tokens are revoked, never deleted, and adding a key to an existing table
on SQLite means rebuilding it (its ON DELETE CASCADE children would be emptied on the way).
Both directions are plain ALTER TABLE ADD / DROP COLUMN (SQLite 3.35 or later).

Revision ID: 20261122_0004
Revises: 20261122_0003
Create Date: 2026-11-22 22:30:00+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "20261122_0004"
down_revision = "20261122_0003"
branch_labels = None
depends_on = None

# Frozen copy of the column type (a migration must not change when app code does).
TIMESTAMP_UTC = sa.DateTime(timezone=True)
OWNED_TABLES = ("plans", "sweeps", "profiles", "custom_models", "custom_clusters")
# Owner columns with an index (listings filter on it); profiles are few per model and not indexed.
INDEXED = ("plans", "sweeps", "custom_models", "custom_clusters")


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("token_prefix", sa.String(length=16), nullable=False),
        sa.Column("scopes", sa.String(length=64), nullable=False),
        sa.Column("created_at", TIMESTAMP_UTC, nullable=False),
        sa.Column("last_used_at", TIMESTAMP_UTC, nullable=True),
        sa.Column("revoked_at", TIMESTAMP_UTC, nullable=True),
        sa.Column("plans_per_minute", sa.Integer(), nullable=True),
        sa.Column("rate_window_start_s", sa.BigInteger(), nullable=False),
        sa.Column("rate_window_requests", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    op.create_index("ix_api_tokens_created_at_id", "api_tokens", ["created_at", "id"])
    for table in OWNED_TABLES:
        op.add_column(table, sa.Column("owner_token_id", sa.String(length=36), nullable=True))
        if table in INDEXED:
            op.create_index(op.f(f"ix_{table}_owner_token_id"), table, ["owner_token_id"])


def downgrade() -> None:
    for table in reversed(OWNED_TABLES):
        if table in INDEXED:
            op.drop_index(op.f(f"ix_{table}_owner_token_id"), table_name=table)
        op.drop_column(table, "owner_token_id")
    op.drop_index("ix_api_tokens_created_at_id", table_name="api_tokens")
    op.drop_table("api_tokens")
