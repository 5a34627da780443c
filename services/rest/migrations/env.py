"""Alembic environment: migrations run on a connection the service hands over.

The service owns the engine (async, SQLite or PostgreSQL); ``adapters/database.py`` opens a
connection and passes it in ``config.attributes["connection"]``, so no URL or logging
configuration lives here.
"""

from __future__ import annotations

from alembic import context

from services.rest.adapters.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run the REST migrations through services.rest.adapters.database.migrate")

# Batch mode lets later revisions alter columns on SQLite, which cannot ALTER in place.
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
