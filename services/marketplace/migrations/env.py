"""Alembic environment of the marketplace: its own history and version table.

The marketplace shares the platform's database with rest but never its tables or its
``alembic_version``: its revisions are recorded in ``marketplace_alembic_version``. The service
hands over a connection in ``config.attributes["connection"]`` (``libs.backbone.sql.migrate``).
"""

from __future__ import annotations

from alembic import context

from services.marketplace.adapters.tables import metadata

VERSION_TABLE = "marketplace_alembic_version"

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run the marketplace migrations through services.marketplace.adapters.storing.migrate")

context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=VERSION_TABLE,
    render_as_batch=True,
)
with context.begin_transaction():
    context.run_migrations()
