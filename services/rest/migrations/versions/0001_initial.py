"""The first schema of the read model: jobs, their attempts and tasks, applied events, users, tokens.

Revision ID: 0001
Revises:
Create Date: 2026-11-22 02:11:28.698902
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "applied_events",
        sa.Column("event_id", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=True),
        sa.Column("applied_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("event_id"),
    )
    with op.batch_alter_table("applied_events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_applied_events_job_id"), ["job_id"], unique=False)

    op.create_table(
        "jobs",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("username", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("virtual_cluster", sa.String(length=128), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("priority_class", sa.String(length=64), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("sub_state", sa.String(length=32), nullable=False),
        sa.Column("execution_type", sa.String(length=8), nullable=False),
        sa.Column("retries", sa.Integer(), nullable=False),
        sa.Column("retries_user", sa.Integer(), nullable=False),
        sa.Column("retries_platform", sa.Integer(), nullable=False),
        sa.Column("retries_resource", sa.Integer(), nullable=False),
        sa.Column("retry_delay_ms", sa.BigInteger(), nullable=True),
        sa.Column("submission_time", sa.BigInteger(), nullable=False),
        sa.Column("created_time", sa.BigInteger(), nullable=True),
        sa.Column("launched_time", sa.BigInteger(), nullable=True),
        sa.Column("completed_time", sa.BigInteger(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("exit_spec", sa.JSON(), nullable=True),
        sa.Column("exit_diagnostics", sa.Text(), nullable=True),
        sa.Column("exit_trigger_message", sa.Text(), nullable=True),
        sa.Column("exit_trigger_role", sa.String(length=128), nullable=True),
        sa.Column("exit_trigger_index", sa.Integer(), nullable=True),
        sa.Column("pending_reason", sa.Text(), nullable=True),
        sa.Column("total_gpus", sa.Integer(), nullable=False),
        sa.Column("total_tasks", sa.Integer(), nullable=False),
        sa.Column("total_task_roles", sa.Integer(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("username", "name", name="uq_jobs_username_name"),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index("ix_jobs_completed_time", ["completed_time"], unique=False)
        batch_op.create_index("ix_jobs_name", ["name"], unique=False)
        batch_op.create_index("ix_jobs_state", ["state"], unique=False)
        batch_op.create_index("ix_jobs_submission_time", ["submission_time"], unique=False)
        batch_op.create_index("ix_jobs_virtual_cluster", ["virtual_cluster"], unique=False)

    op.create_table(
        "users",
        sa.Column("username", sa.String(length=128), nullable=False),
        sa.Column("password_hash", sa.String(length=256), nullable=True),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("email", sa.String(length=256), nullable=True),
        sa.Column("virtual_clusters", sa.JSON(), nullable=False),
        sa.Column("extension", sa.JSON(), nullable=False),
        sa.Column("created_time", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("username"),
    )
    op.create_table(
        "job_attempts",
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("sub_state", sa.String(length=32), nullable=False),
        sa.Column("created_time", sa.BigInteger(), nullable=True),
        sa.Column("launched_time", sa.BigInteger(), nullable=True),
        sa.Column("completed_time", sa.BigInteger(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("exit_spec", sa.JSON(), nullable=True),
        sa.Column("exit_diagnostics", sa.Text(), nullable=True),
        sa.Column("exit_trigger_message", sa.Text(), nullable=True),
        sa.Column("exit_trigger_role", sa.String(length=128), nullable=True),
        sa.Column("exit_trigger_index", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "attempt"),
    )
    op.create_table(
        "task_attempts",
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("job_attempt", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=128), nullable=False),
        sa.Column("task_index", sa.Integer(), nullable=False),
        sa.Column("task_attempt", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("node", sa.String(length=256), nullable=True),
        sa.Column("ip", sa.String(length=256), nullable=True),
        sa.Column("ports", sa.JSON(), nullable=False),
        sa.Column("gpus", sa.String(length=256), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("created_time", sa.BigInteger(), nullable=True),
        sa.Column("launched_time", sa.BigInteger(), nullable=True),
        sa.Column("completed_time", sa.BigInteger(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("exit_spec", sa.JSON(), nullable=True),
        sa.Column("exit_diagnostics", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "job_attempt", "role", "task_index", "task_attempt"),
    )
    op.create_table(
        "tokens",
        sa.Column("jti", sa.String(length=64), nullable=False),
        sa.Column("username", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("created_time", sa.BigInteger(), nullable=False),
        sa.Column("expires_time", sa.BigInteger(), nullable=False),
        sa.Column("revoked", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["username"], ["users.username"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("jti"),
    )
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.create_index("ix_tokens_username", ["username"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.drop_index("ix_tokens_username")

    op.drop_table("tokens")
    op.drop_table("task_attempts")
    op.drop_table("job_attempts")
    op.drop_table("users")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_virtual_cluster")
        batch_op.drop_index("ix_jobs_submission_time")
        batch_op.drop_index("ix_jobs_state")
        batch_op.drop_index("ix_jobs_name")
        batch_op.drop_index("ix_jobs_completed_time")

    op.drop_table("jobs")
    with op.batch_alter_table("applied_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_applied_events_job_id"))

    op.drop_table("applied_events")
