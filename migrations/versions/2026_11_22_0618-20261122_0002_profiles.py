"""Measured per-layer profiles (partitura-profile/1 documents).

Revision ID: 20261122_0002
Revises: 20261122_0001
Create Date: 2026-11-22 06:18:36+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "20261122_0002"
down_revision = "20261122_0001"
branch_labels = None
depends_on = None

# Frozen copies of the column types (a migration must not change when app code does).
JSON_DOCUMENT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIMESTAMP_UTC = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "profiles",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("created_at", TIMESTAMP_UTC, nullable=False),
        sa.Column("model_name", sa.String(length=128), nullable=False),
        sa.Column("device", sa.String(length=256), nullable=False),
        sa.Column("precision", sa.String(length=8), nullable=False),
        sa.Column("micro_batch_size", sa.Integer(), nullable=False),
        sa.Column("seq_length", sa.Integer(), nullable=False),
        sa.Column("tp_size", sa.Integer(), nullable=False),
        sa.Column("document", JSON_DOCUMENT, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_profiles")),
    )
    op.create_index("ix_profiles_created_at_id", "profiles", ["created_at", "id"])
    op.create_index(op.f("ix_profiles_model_name"), "profiles", ["model_name"])


def downgrade() -> None:
    op.drop_index(op.f("ix_profiles_model_name"), table_name="profiles")
    op.drop_index("ix_profiles_created_at_id", table_name="profiles")
    op.drop_table("profiles")
