"""The marketplace's Alembic history, with its own version table (``marketplace_alembic_version``)."""
