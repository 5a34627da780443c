"""A task's note: what the executor told the user about how the task runs.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 17:00:00

The local executor runs a task's commands on the host, not in its docker image; task.started
says so (with the user and the directory), and the job detail shows it per task.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("task_attempts", sa.Column("note", sa.Text(), nullable=True))


def downgrade() -> None:
    # SQLite (3.35 and later) and PostgreSQL both drop a column in place.
    op.drop_column("task_attempts", "note")
