"""The SQL engine and the schema migrations run at start-up.

One code path for both backends: SQLAlchemy's async engine over aiosqlite (embedded) or
asyncpg (production). Alembic runs inside the service on start, on a connection of that
engine, so an upgrade of the platform upgrades its schema with no separate step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from libs.backbone.sql import ENGINE_OPTIONS, create_engine
from libs.backbone.sql import migrate as migrate_service

__all__ = ["create_engine", "create_read_engine", "migrate"]

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"
# An arbitrary constant naming the advisory lock that serialises migrations across replicas.
_MIGRATION_LOCK = 0x5041495F52455354


def create_read_engine(url: str, engine: AsyncEngine, *, readers: int = 2) -> AsyncEngine:
    """Connections for reads that need not queue behind writes; ``engine`` itself unless SQLite.

    SQLite in WAL lets readers run beside its one writer, each seeing the last commit, so a job
    list or a token check never waits for the projection's transaction. These connections are
    query-only: a write through them fails instead of contending for SQLite's write lock.
    PostgreSQL's pool already has several connections; an in-memory SQLite database exists only
    on its one connection.
    """
    if not url.startswith("sqlite") or url.split("///", 1)[-1] in ("", ":memory:"):
        return engine
    reader = create_async_engine(
        url, connect_args={"timeout": 30}, pool_size=readers, max_overflow=0, **ENGINE_OPTIONS
    )

    @event.listens_for(reader.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA query_only=ON")
        cursor.close()

    return reader


async def migrate(engine: AsyncEngine) -> None:
    """Bring the schema to the newest revision (a no-op when it is already there)."""
    await migrate_service(engine, MIGRATIONS, _MIGRATION_LOCK)
