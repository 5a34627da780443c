"""Revisions of a job's task rows, so a kept job detail reads only the rows that changed.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 06:00:00

Every projection transaction that writes task rows of a job raises the job's tasks_revision
once and stamps the rows it writes with the new value. The detail of a job of thousands of
tasks is then brought up to date from the rows above the revision it was built at, instead of
all of them. Rows written before this migration carry 0, the revision every job starts at.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("tasks_revision", sa.BigInteger(), nullable=False, server_default="0"))
    op.add_column("task_attempts", sa.Column("revision", sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("task_attempts", "revision")
    op.drop_column("jobs", "tasks_revision")
