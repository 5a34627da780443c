"""The SQL engine every service with tables uses: one code path for SQLite and PostgreSQL.

SQLAlchemy's async engine over aiosqlite (embedded) or asyncpg (production). Each service runs
its own Alembic history at start with its own version table, so services sharing the
platform's database never touch each other's tables.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import orjson
from alembic import command
from alembic.config import Config
from sqlalchemy import event, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from libs.backbone import sqlite_loop


def read_json(text: str | bytes) -> Any:
    """A JSON column's value: orjson reads it several times faster than Python's json (a large
    job's task rows hold two each). Python's json reads what orjson would refuse (NaN, which a
    job's YAML config may hold and Python's json wrote) or read wrongly: orjson reads an integer
    past 64 bits as a float, so text with a run of 19 digits or more is left to Python's json."""
    if isinstance(text, str) and _LONG_NUMBER.search(text) is None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


_LONG_NUMBER = re.compile(r"\d{19}")
ENGINE_OPTIONS: dict[str, Any] = {"json_deserializer": read_json}
"""Options every engine of the platform is made with."""


async def _open_on_loop(path: str) -> sqlite_loop.LoopConnection:
    connection = sqlite_loop.connect(path, timeout=30)
    await connection
    return connection


def create_engine(url: str) -> AsyncEngine:
    """An async engine; SQLite gets foreign keys on, WAL with NORMAL sync, and one shared connection."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        # One connection: SQLite has one writer at a time anyway, and queueing in the pool is far
        # cheaper than SQLite's busy-wait backoff when writers collide (measured in bench/).
        options: dict[str, Any] = {"connect_args": {"timeout": 30}}
        if path and path != ":memory:" and "?" not in path:
            # Its small calls made on the event loop's thread (libs/backbone/sqlite_loop.py).
            options = {"async_creator": functools.partial(_open_on_loop, path)}
        engine = create_async_engine(url, pool_size=1, max_overflow=0, **options, **ENGINE_OPTIONS)

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
    return create_async_engine(url, pool_pre_ping=True, **ENGINE_OPTIONS)


async def migrate(engine: AsyncEngine, script_location: Path, lock_key: int) -> None:
    """Bring a service's schema to its newest revision (a no-op when it is already there).

    ``script_location`` is the service's Alembic folder (its ``env.py`` names the version
    table); on PostgreSQL an advisory lock ``lock_key`` lets one of several replicas starting
    together migrate while the others wait and find the schema current.
    """

    def upgrade(connection: Connection) -> None:
        config = Config()
        config.set_main_option("script_location", str(script_location))
        config.attributes["connection"] = connection
        command.upgrade(config, "head")

    async with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            await connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": lock_key})
        await connection.run_sync(upgrade)
