"""The marketplace's tables: items, their labels and groups, stars, uses.

Revision ID: m0001
Revises:
Create Date: 2026-11-23 20:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "m0001"
down_revision = None
branch_labels = None
depends_on = None


def _labels(name: str, column: str, length: int) -> None:
    op.create_table(
        name,
        sa.Column("item_id", sa.String(32), sa.ForeignKey("marketplace_items.id", ondelete="CASCADE")),
        sa.Column(column, sa.String(length), nullable=False),
        sa.PrimaryKeyConstraint("item_id", column),
    )
    op.create_index(f"ix_{name}_{column}", name, [column])


def upgrade() -> None:
    op.create_table(
        "marketplace_items",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("author", sa.String(128), nullable=False),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("protocol", sa.Text(), nullable=False),
        sa.Column("data_type", sa.String(16), nullable=False),
        sa.Column("data_url", sa.Text(), nullable=False),
        sa.Column("is_private", sa.Boolean(), nullable=False),
        sa.Column("is_public", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("status_reason", sa.Text(), nullable=False),
        sa.Column("use_number", sa.BigInteger(), nullable=False),
        sa.Column("star_number", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_marketplace_items_author", "marketplace_items", ["author"])
    op.create_index("ix_marketplace_items_status", "marketplace_items", ["status"])
    op.create_index("ix_marketplace_items_created", "marketplace_items", ["created_at", "id"])
    _labels("marketplace_item_tags", "name", 64)
    _labels("marketplace_item_categories", "name", 64)
    _labels("marketplace_item_groups", "groupname", 128)
    op.create_table(
        "marketplace_stars",
        sa.Column("item_id", sa.String(32), sa.ForeignKey("marketplace_items.id", ondelete="CASCADE")),
        sa.Column("username", sa.String(128), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("item_id", "username"),
    )
    op.create_index("ix_marketplace_stars_username", "marketplace_stars", ["username"])
    op.create_table(
        "marketplace_uses",
        sa.Column("job_id", sa.String(128), primary_key=True),
        sa.Column("item_id", sa.String(32), nullable=False),
        sa.Column("username", sa.String(128), nullable=False),
        sa.Column("used_at", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_marketplace_uses_item", "marketplace_uses", ["item_id"])


def downgrade() -> None:
    for table in (
        "marketplace_uses",
        "marketplace_stars",
        "marketplace_item_groups",
        "marketplace_item_categories",
        "marketplace_item_tags",
        "marketplace_items",
    ):
        op.drop_table(table)
