"""The marketplace's own tables in the platform's SQL database (every name starts ``marketplace_``).

Labels (tags, categories) and the groups an item is shared with are rows, so filters and the
visibility rule run in SQL and a page is cut after them. Stars and uses are rows keyed by who
starred and by job id, so a star or a use counts once; the item keeps both counts beside it.
Times are milliseconds since the epoch, as rest stores them.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

items = sa.Table(
    "marketplace_items",
    metadata,
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
    sa.Index("ix_marketplace_items_author", "author"),
    sa.Index("ix_marketplace_items_status", "status"),
    sa.Index("ix_marketplace_items_created", "created_at", "id"),
)


def _labels(name: str, column: str, length: int) -> sa.Table:
    return sa.Table(
        name,
        metadata,
        sa.Column("item_id", sa.String(32), sa.ForeignKey("marketplace_items.id", ondelete="CASCADE")),
        sa.Column(column, sa.String(length), nullable=False),
        sa.PrimaryKeyConstraint("item_id", column),
        sa.Index(f"ix_{name}_{column}", column),
    )


tags = _labels("marketplace_item_tags", "name", 64)
categories = _labels("marketplace_item_categories", "name", 64)
groups = _labels("marketplace_item_groups", "groupname", 128)

stars = sa.Table(
    "marketplace_stars",
    metadata,
    sa.Column("item_id", sa.String(32), sa.ForeignKey("marketplace_items.id", ondelete="CASCADE")),
    sa.Column("username", sa.String(128), nullable=False),
    sa.Column("created_at", sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint("item_id", "username"),
    sa.Index("ix_marketplace_stars_username", "username"),
)

# One row per job submitted from an item: the job id is the key, so a redelivered
# job.submitted finds its row and counts nothing twice. Kept when the item goes.
uses = sa.Table(
    "marketplace_uses",
    metadata,
    sa.Column("job_id", sa.String(128), primary_key=True),
    sa.Column("item_id", sa.String(32), nullable=False),
    sa.Column("username", sa.String(128), nullable=False),
    sa.Column("used_at", sa.BigInteger(), nullable=False),
    sa.Index("ix_marketplace_uses_item", "item_id"),
)
