"""The SQL engine and the schema migrations run at start-up.

One code path for both backends: SQLAlchemy's async engine over aiosqlite (embedded) or
asyncpg (production). Alembic runs inside the service on start, on a connection of that
engine, so an upgrade of the platform upgrades its schema with no separate step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import event, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"
# An arbitrary constant naming the advisory lock that serialises migrations across replicas.
_MIGRATION_LOCK = 0x5041495F52455354


def create_engine(url: str) -> AsyncEngine:
    """An async engine; SQLite gets foreign keys on, WAL with NORMAL sync, and one shared connection."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        # One connection: SQLite has one writer at a time anyway, and queueing in the pool is far
        # cheaper than SQLite's busy-wait backoff when writers collide (measured in bench/).
        engine = create_async_engine(url, connect_args={"timeout": 30}, pool_size=1, max_overflow=0)

        @event.listens_for(engine.sync_engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA journal_mode=WAL")
            # With WAL, NORMAL survives any process crash; an OS crash may lose the last commits,
            # which the projection rebuilds from the job stream.
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        return engine
    return create_async_engine(url, pool_pre_ping=True)


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
    reader = create_async_engine(url, connect_args={"timeout": 30}, pool_size=readers, max_overflow=0)

    @event.listens_for(reader.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA query_only=ON")
        cursor.close()

    return reader


def _alembic_config(connection: Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def _upgrade(connection: Connection) -> None:
    command.upgrade(_alembic_config(connection), "head")


async def migrate(engine: AsyncEngine) -> None:
    """Bring the schema to the newest revision (a no-op when it is already there)."""
    async with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            # Replicas starting together: one migrates, the others wait and find the schema current.
            await connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
        await connection.run_sync(_upgrade)
