"""A task's image digest: the docker image it ran, as repository@sha256:...

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26 20:45:00

Where a container engine runs a task in its image, task.started names the image the task runs
by its digest; the job detail shows it per task (imageDigest), so a job can be run again on the
same bits.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("task_attempts", sa.Column("image_digest", sa.String(512), nullable=True))


def downgrade() -> None:
    op.drop_column("task_attempts", "image_digest")
