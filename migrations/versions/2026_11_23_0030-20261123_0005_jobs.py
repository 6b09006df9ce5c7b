"""Jobs and their points (app.jobs), and on Postgres the task queue's own tables.

On Postgres the jobs run on procrastinate, whose tables, types and functions this revision
creates in a schema of their own, ``procrastinate`` (the service's tables stay alone in the
default schema; the queue's connections set their search_path to it). The SQL is the schema of
the pinned procrastinate release (``procrastinate.schema.SchemaManager.get_schema``); a later
procrastinate release that changes it comes with its own migration files, applied by a new
revision here. SQLite runs jobs in-process and gets no queue tables.

Revision ID: 20261123_0005
Revises: 20261122_0004
Create Date: 2026-11-23 00:30:00+00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "20261123_0005"
down_revision = "20261122_0004"
branch_labels = None
depends_on = None

# Frozen copies of the column types (a migration must not change when app code does).
TIMESTAMP_UTC = sa.DateTime(timezone=True)
JSON_DOCUMENT = sa.JSON().with_variant(sa.dialects.postgresql.JSONB(), "postgresql")
# The Postgres schema that holds procrastinate's objects (app.jobs.queue.QUEUE_SCHEMA).
QUEUE_SCHEMA = "procrastinate"


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", TIMESTAMP_UTC, nullable=False),
        sa.Column("started_at", TIMESTAMP_UTC, nullable=True),
        sa.Column("finished_at", TIMESTAMP_UTC, nullable=True),
        sa.Column("request", JSON_DOCUMENT, nullable=False),
        sa.Column("points_total", sa.Integer(), nullable=False),
        sa.Column("result_id", sa.String(length=36), nullable=True),
        sa.Column("error", JSON_DOCUMENT, nullable=True),
        sa.Column("owner_token_id", sa.String(length=36), nullable=True),
        sa.CheckConstraint("status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')", name=op.f("ck_jobs_status")),
        sa.CheckConstraint("kind IN ('sweep', 'plan')", name=op.f("ck_jobs_kind")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    op.create_index("ix_jobs_created_at_id", "jobs", ["created_at", "id"])
    op.create_index(op.f("ix_jobs_status"), "jobs", ["status"])
    op.create_index(op.f("ix_jobs_owner_token_id"), "jobs", ["owner_token_id"])
    op.create_table(
        "job_points",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=36), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("request", JSON_DOCUMENT, nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("plan_id", sa.String(length=36), nullable=True),
        sa.Column("completed_at", TIMESTAMP_UTC, nullable=True),
        sa.CheckConstraint("status IN ('queued', 'running', 'succeeded', 'cancelled')", name=op.f("ck_job_points_status")),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_job_points_job_id_jobs"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["plan_id"], ["plans.id"], name=op.f("fk_job_points_plan_id_plans"), ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_points")),
        sa.UniqueConstraint("job_id", "position", name="uq_job_points_job_id_position"),
    )
    op.create_index(op.f("ix_job_points_job_id"), "job_points", ["job_id"])
    op.create_index(op.f("ix_job_points_plan_id"), "job_points", ["plan_id"])
    if op.get_bind().dialect.name == "postgresql":
        _create_queue_schema()


def _create_queue_schema() -> None:
    from procrastinate.schema import SchemaManager

    bind = op.get_bind()
    search_path = bind.exec_driver_sql("SELECT current_setting('search_path')").scalar_one()
    bind.exec_driver_sql(f"CREATE SCHEMA {QUEUE_SCHEMA}")
    # The schema script is many statements with no parameters: psycopg runs it as one script
    # (a '%' in it is literal), in this migration's transaction.
    cursor = bind.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(f"SET LOCAL search_path TO {QUEUE_SCHEMA}")
        cursor.execute(SchemaManager.get_schema())
        cursor.execute("SELECT set_config('search_path', %s, true)", (search_path,))
    finally:
        cursor.close()


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP SCHEMA IF EXISTS {QUEUE_SCHEMA} CASCADE")
    op.drop_index(op.f("ix_job_points_plan_id"), table_name="job_points")
    op.drop_index(op.f("ix_job_points_job_id"), table_name="job_points")
    op.drop_table("job_points")
    op.drop_index(op.f("ix_jobs_owner_token_id"), table_name="jobs")
    op.drop_index(op.f("ix_jobs_status"), table_name="jobs")
    op.drop_index("ix_jobs_created_at_id", table_name="jobs")
    op.drop_table("jobs")
