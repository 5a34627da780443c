"""Indexes for the job list over large stores: each filter and order field, then time and id.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 05:20:00

The job list orders by a field, then submission time and id (newest first), and pages with
an offset. Each index below leads with a filter or order field and ends in those two, so a
page comes out of the index in order and a deep offset skips index entries instead of rows.
The single-column indexes of 0001 are the prefixes of these and are dropped. Tags: a
partial index of the tagged jobs only, tags kept in it, on both backends.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_OLD = {
    "ix_jobs_virtual_cluster": ["virtual_cluster"],
    "ix_jobs_state": ["state"],
    "ix_jobs_submission_time": ["submission_time"],
    "ix_jobs_completed_time": ["completed_time"],
    "ix_jobs_name": ["name"],
}
# The keyword's text, as services/rest/adapters/tables.py defines it.
_SEARCH_TEXT = "lower(name) || '/' || lower(username) || '/' || lower(virtual_cluster)"
_COMPLETED_NULL = sa.text("(completed_time IS NULL)")
_PRIORITY_NULL = sa.text("(priority_class IS NULL)")
_NEW: dict[str, list[str | sa.TextClause]] = {
    "ix_jobs_submission": ["submission_time", "id"],
    "ix_jobs_search": ["submission_time", "id", "name", "username", "virtual_cluster", "search_text"],
    "ix_jobs_user_list": [
        "username",
        "submission_time",
        "id",
        "state",
        "virtual_cluster",
        "name",
        "retries",
        "total_tasks",
        "total_gpus",
        "completed_time",
        "priority_class",
    ],
    "ix_jobs_vc_submission": ["virtual_cluster", "submission_time", "id"],
    "ix_jobs_state_submission": ["state", "submission_time", "id"],
    "ix_jobs_name_submission": ["name", "submission_time", "id"],
    "ix_jobs_retries_submission": ["retries", "submission_time", "id"],
    "ix_jobs_total_tasks_submission": ["total_tasks", "submission_time", "id"],
    "ix_jobs_total_gpus_submission": ["total_gpus", "submission_time", "id"],
    "ix_jobs_completed_order": [_COMPLETED_NULL, "completed_time", "submission_time", "id"],
    "ix_jobs_priority_order": [_PRIORITY_NULL, "priority_class", "submission_time", "id"],
}


def _trigram_available(bind: sa.Connection) -> bool:
    """pg_trgm installed, or installable here (it is a trusted extension since PostgreSQL 13)."""
    if bind.execute(sa.text("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'")).first():
        return True
    if not bind.execute(sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'")).first():
        return False
    try:
        with bind.begin_nested():
            bind.execute(sa.text("CREATE EXTENSION IF NOT EXISTS pg_trgm"))
    except sa.exc.DBAPIError:
        return False  # not allowed to: keywords are then found by scanning ix_jobs_search
    return True


def upgrade() -> None:
    bind = op.get_bind()
    postgresql = bind.dialect.name == "postgresql"
    # PostgreSQL stores the generated value; SQLite can only add a virtual one, computed on read.
    generated = sa.Computed(_SEARCH_TEXT, persisted=True if postgresql else None)
    op.add_column("jobs", sa.Column("search_text", sa.Text(), generated, nullable=True))
    for name, columns in _NEW.items():
        op.create_index(name, "jobs", columns)
    if postgresql:
        op.create_index(
            "ix_jobs_tagged_include",
            "jobs",
            ["submission_time", "id"],
            postgresql_include=["tags"],
            postgresql_where=sa.text("CAST(tags AS TEXT) != '[]'"),
        )
        if _trigram_available(bind):
            op.execute("CREATE INDEX ix_jobs_search_trgm ON jobs USING gin (search_text gin_trgm_ops)")
    else:
        op.create_index(
            "ix_jobs_tagged",
            "jobs",
            ["submission_time", "id", "tags"],
            sqlite_where=sa.text("CAST(tags AS TEXT) != '[]'"),
        )
    for name in _OLD:
        op.drop_index(name, table_name="jobs")


def downgrade() -> None:
    for name, columns in _OLD.items():
        op.create_index(name, "jobs", columns)
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX IF EXISTS ix_jobs_search_trgm")
        op.drop_index("ix_jobs_tagged_include", "jobs")
    else:
        op.drop_index("ix_jobs_tagged", "jobs")
    for name in _NEW:
        op.drop_index(name, table_name="jobs")
    op.drop_column("jobs", "search_text")
