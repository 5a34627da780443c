"""The SQLite engine's connection: small calls on the event loop's thread, long ones on a worker.

A SQL function registered on the connection records which thread evaluated it, so each test
sees where SQLite actually did the work, not only that the answers are right.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, event, insert, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from libs.backbone.sql import create_engine
from libs.backbone.sqlite_loop import INLINE_ROWS, LoopConnection

metadata = MetaData()
items = Table("items", metadata, Column("id", Integer, primary_key=True), Column("name", String, unique=True))


@pytest.fixture
def threads() -> list[int]:
    """The thread of each evaluation of the SQL function ``on_thread``, in order."""
    return []


@pytest.fixture
async def engine(tmp_path: Path, threads: list[int]) -> Any:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'loop.db'}")

    @event.listens_for(engine.sync_engine, "connect")
    def _where(dbapi_connection: Any, _record: Any) -> None:
        def where(value: Any) -> Any:
            threads.append(threading.get_ident())
            return value

        dbapi_connection.create_function("on_thread", 1, where)

    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    yield engine
    await engine.dispose()


async def test_a_file_database_gets_the_loop_connection(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        raw = await conn.get_raw_connection()
        assert isinstance(raw.driver_connection, LoopConnection)


async def test_small_statements_run_on_the_loop_thread(engine: AsyncEngine, threads: list[int]) -> None:
    loop_thread = threading.get_ident()
    async with engine.begin() as conn:
        await conn.execute(insert(items), [{"id": i, "name": f"n{i}"} for i in range(10)])
        names = (await conn.execute(text("SELECT on_thread(name) FROM items ORDER BY id"))).scalars().all()
    assert names == [f"n{i}" for i in range(10)]
    assert set(threads) == {loop_thread}
    async with engine.connect() as conn:  # committed
        assert (await conn.execute(text("SELECT count(*) FROM items"))).scalar_one() == 10


async def test_a_large_result_is_read_past_its_first_rows_on_the_worker(
    engine: AsyncEngine, threads: list[int]
) -> None:
    rows = 3 * INLINE_ROWS + 5
    async with engine.begin() as conn:
        await conn.execute(insert(items), [{"id": i, "name": f"n{i}"} for i in range(rows)])
        names = (await conn.execute(text("SELECT on_thread(name) FROM items ORDER BY id"))).scalars().all()
    assert names == [f"n{i}" for i in range(rows)]
    loop_thread = threading.get_ident()
    seen = threads
    assert len(seen) == rows
    # Exactly the first INLINE_ROWS rows were stepped on the loop's thread, the rest elsewhere.
    assert seen[:INLINE_ROWS] == [loop_thread] * INLINE_ROWS
    assert loop_thread not in seen[INLINE_ROWS + 1 :]


async def test_a_large_executemany_runs_on_the_worker(engine: AsyncEngine, threads: list[int]) -> None:
    loop_thread = threading.get_ident()
    many = [{"name": f"n{i}"} for i in range(INLINE_ROWS + 1)]
    few = [{"name": f"m{i}"} for i in range(INLINE_ROWS)]
    statement = text("INSERT INTO items (name) VALUES (on_thread(:name))")
    async with engine.begin() as conn:
        await conn.execute(statement, many)
        assert loop_thread not in threads
        assert len(threads) == len(many)
        await conn.execute(statement, few)
    assert threads[len(many) :] == [loop_thread] * len(few)


async def test_errors_and_rollbacks_are_the_drivers_own(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(insert(items).values(id=1, name="taken"))

    async def both() -> None:
        async with engine.begin() as conn:
            await conn.execute(insert(items).values(id=2, name="kept only if committed"))
            await conn.execute(insert(items).values(id=3, name="taken"))

    with pytest.raises(IntegrityError):
        await both()
    async with engine.connect() as conn:
        names = (await conn.execute(select(items.c.name).order_by(items.c.id))).scalars().all()
    assert names == ["taken"]


async def test_the_connection_closes_and_a_new_one_opens(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(insert(items).values(id=1, name="a"))
    [worker] = workers()
    await engine.dispose()  # closes the pooled connection and stops its worker thread
    worker.join(timeout=10)
    assert not worker.is_alive()
    async with engine.connect() as conn:
        assert (await conn.execute(select(items.c.name))).scalars().all() == ["a"]
    assert len(workers()) == 1


def workers() -> list[threading.Thread]:
    """aiosqlite's worker threads alive (daemons, so that none holds up the process's exit)."""
    alive = [t for t in threading.enumerate() if "_connection_worker_thread" in t.name and t.is_alive()]
    assert all(t.daemon for t in alive)
    return alive
