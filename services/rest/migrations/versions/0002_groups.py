"""Groups and memberships: the acls that decide admin rights and virtual-cluster access.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 03:20:00

The default group (virtual cluster ``default``) and the admin group are created here, as
OpenPAI creates them at first start, and every existing user joins the default group; users
whose ``admin`` flag was set join the admin group, so nobody loses a right in the upgrade.
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    groups = op.create_table(
        "groups",
        sa.Column("groupname", sa.String(length=128), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("external_name", sa.String(length=256), nullable=False),
        sa.Column("extension", sa.JSON(), nullable=False),
        sa.Column("created_time", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("groupname"),
    )
    op.create_table(
        "user_groups",
        sa.Column("username", sa.String(length=128), nullable=False),
        sa.Column("groupname", sa.String(length=128), nullable=False),
        sa.ForeignKeyConstraint(["username"], ["users.username"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["groupname"], ["groups.groupname"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("username", "groupname"),
    )
    with op.batch_alter_table("user_groups", schema=None) as batch_op:
        batch_op.create_index("ix_user_groups_groupname", ["groupname"], unique=False)
    now = int(time.time() * 1000)
    op.bulk_insert(
        groups,
        [
            {
                "groupname": "default",
                "description": "group for default vc",
                "external_name": "",
                "extension": {"acls": {"virtualClusters": ["default"], "admin": False, "storageConfigs": []}},
                "created_time": now,
            },
            {
                "groupname": "admingroup",
                "description": "group for admin",
                "external_name": "",
                "extension": {"acls": {"virtualClusters": [], "admin": True, "storageConfigs": []}},
                "created_time": now,
            },
        ],
    )
    op.execute("INSERT INTO user_groups (username, groupname) SELECT username, 'default' FROM users")
    op.execute(
        "INSERT INTO user_groups (username, groupname) SELECT username, 'admingroup' FROM users WHERE admin"
    )


def downgrade() -> None:
    with op.batch_alter_table("user_groups", schema=None) as batch_op:
        batch_op.drop_index("ix_user_groups_groupname")
    op.drop_table("user_groups")
    op.drop_table("groups")
