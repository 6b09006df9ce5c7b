"""Plans with their ranked candidates, and custom catalog models and clusters.

Revision ID: 20261122_0001
Revises:
Create Date: 2026-11-22 06:12:35+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "20261122_0001"
down_revision = None
branch_labels = None
depends_on = None

# Frozen copies of the column types (a migration must not change when app code does).
JSON_DOCUMENT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIMESTAMP_UTC = sa.DateTime(timezone=True)


def _custom_entry_table(name: str) -> None:
    op.create_table(
        name,
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("spec", JSON_DOCUMENT, nullable=False),
        sa.Column("created_at", TIMESTAMP_UTC, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f(f"pk_{name}")),
        sa.UniqueConstraint("name", name=op.f(f"uq_{name}_name")),
    )


def upgrade() -> None:
    _custom_entry_table("custom_clusters")
    _custom_entry_table("custom_models")
    op.create_table(
        "plans",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("created_at", TIMESTAMP_UTC, nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("model_name", sa.String(length=128), nullable=False),
        sa.Column("cluster_name", sa.String(length=128), nullable=False),
        sa.Column("objective", sa.String(length=32), nullable=False),
        sa.Column("num_gpus", sa.Integer(), nullable=False),
        sa.Column("timed_out", sa.Boolean(), nullable=False),
        sa.Column("request", JSON_DOCUMENT, nullable=False),
        sa.Column("catalog_snapshot", JSON_DOCUMENT, nullable=False),
        sa.Column("solver_version", sa.String(length=64), nullable=False),
        sa.Column("ortools_version", sa.String(length=64), nullable=False),
        sa.Column("search_stats", JSON_DOCUMENT, nullable=False),
        sa.Column("explanation", JSON_DOCUMENT, nullable=True),
        sa.CheckConstraint("status IN ('succeeded', 'infeasible')", name=op.f("ck_plans_status")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_plans")),
        sa.UniqueConstraint("request_hash", name=op.f("uq_plans_request_hash")),
    )
    op.create_index(op.f("ix_plans_cluster_name"), "plans", ["cluster_name"])
    op.create_index("ix_plans_created_at_id", "plans", ["created_at", "id"])
    op.create_index(op.f("ix_plans_model_name"), "plans", ["model_name"])
    op.create_index(op.f("ix_plans_status"), "plans", ["status"])
    op.create_table(
        "plan_candidates",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("plan_id", sa.String(length=36), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("step_time_s", sa.Float(), nullable=True),
        sa.Column("tokens_per_s", sa.Float(), nullable=True),
        sa.Column("peak_memory_gib", sa.Float(), nullable=True),
        sa.Column("parallel", JSON_DOCUMENT, nullable=False),
        sa.Column("document", JSON_DOCUMENT, nullable=False),
        sa.ForeignKeyConstraint(
            ["plan_id"], ["plans.id"], name=op.f("fk_plan_candidates_plan_id_plans"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_plan_candidates")),
        sa.UniqueConstraint("plan_id", "rank", name="uq_plan_candidates_plan_id_rank"),
    )
    op.create_index(op.f("ix_plan_candidates_plan_id"), "plan_candidates", ["plan_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_plan_candidates_plan_id"), table_name="plan_candidates")
    op.drop_table("plan_candidates")
    op.drop_index(op.f("ix_plans_status"), table_name="plans")
    op.drop_index(op.f("ix_plans_model_name"), table_name="plans")
    op.drop_index("ix_plans_created_at_id", table_name="plans")
    op.drop_index(op.f("ix_plans_cluster_name"), table_name="plans")
    op.drop_table("plans")
    op.drop_table("custom_models")
    op.drop_table("custom_clusters")
