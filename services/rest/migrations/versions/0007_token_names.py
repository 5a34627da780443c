"""A token's name: what its owner called it when creating it (a script, a pipeline).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-28 19:00:00

Application tokens are created with a name and, optionally, an expiry (the existing
``expires_time``); tokens from before, and login tokens, have the empty name.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tokens", sa.Column("name", sa.String(128), nullable=False, server_default=""))


def downgrade() -> None:
    op.drop_column("tokens", "name")
