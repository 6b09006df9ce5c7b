"""Sweeps and their points (each point links its stored plan).

Revision ID: 20261122_0003
Revises: 20261122_0002
Create Date: 2026-11-22 21:45:00+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "20261122_0003"
down_revision = "20261122_0002"
branch_labels = None
depends_on = None

# Frozen copies of the column types (a migration must not change when app code does).
JSON_DOCUMENT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIMESTAMP_UTC = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("created_at", TIMESTAMP_UTC, nullable=False),
        sa.Column("model_name", sa.String(length=128), nullable=False),
        sa.Column("num_points", sa.Integer(), nullable=False),
        sa.Column("request", JSON_DOCUMENT, nullable=False),
        sa.Column("analysis", JSON_DOCUMENT, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sweeps")),
    )
    op.create_index("ix_sweeps_created_at_id", "sweeps", ["created_at", "id"])
    op.create_index(op.f("ix_sweeps_model_name"), "sweeps", ["model_name"])
    op.create_table(
        "sweep_points",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("sweep_id", sa.String(length=36), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("plan_id", sa.String(length=36), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("cluster_name", sa.String(length=128), nullable=False),
        sa.Column("num_gpus", sa.Integer(), nullable=False),
        sa.Column("global_batch_size", sa.Integer(), nullable=False),
        sa.Column("document", JSON_DOCUMENT, nullable=False),
        sa.CheckConstraint("status IN ('succeeded', 'infeasible')", name=op.f("ck_sweep_points_status")),
        sa.ForeignKeyConstraint(
            ["sweep_id"], ["sweeps.id"], name=op.f("fk_sweep_points_sweep_id_sweeps"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["plan_id"], ["plans.id"], name=op.f("fk_sweep_points_plan_id_plans"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sweep_points")),
        sa.UniqueConstraint("sweep_id", "position", name="uq_sweep_points_sweep_id_position"),
    )
    op.create_index(op.f("ix_sweep_points_sweep_id"), "sweep_points", ["sweep_id"])
    op.create_index(op.f("ix_sweep_points_plan_id"), "sweep_points", ["plan_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_sweep_points_plan_id"), table_name="sweep_points")
    op.drop_index(op.f("ix_sweep_points_sweep_id"), table_name="sweep_points")
    op.drop_table("sweep_points")
    op.drop_index(op.f("ix_sweeps_model_name"), table_name="sweeps")
    op.drop_index("ix_sweeps_created_at_id", table_name="sweeps")
    op.drop_table("sweeps")
