"""Alembic migrations of the REST read model, run by the service at start-up."""
