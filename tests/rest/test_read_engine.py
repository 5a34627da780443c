"""Reads on their own SQLite connections: they see every commit and can never write."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from services.rest.adapters.database import create_engine, create_read_engine, migrate
from services.rest.adapters.tables import applied_events


async def count(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int(await conn.scalar(select(func.count()).select_from(applied_events)) or 0)


async def test_a_sqlite_reader_sees_each_commit_and_refuses_writes(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'rest.db'}"
    engine = create_engine(url)
    await migrate(engine)
    reader = create_read_engine(url, engine)
    try:
        assert reader is not engine
        assert await count(reader) == 0
        async with engine.begin() as conn:
            await conn.execute(insert(applied_events).values(event_id="e1", job_id=None, applied_at=1))
        assert await count(reader) == 1
        with pytest.raises(OperationalError, match="readonly"):
            async with reader.begin() as conn:
                await conn.execute(insert(applied_events).values(event_id="e2", job_id=None, applied_at=2))
        assert await count(engine) == 1
    finally:
        await reader.dispose()
        await engine.dispose()


def test_postgresql_reads_through_its_own_pool() -> None:
    url = "postgresql+asyncpg://postgres@127.0.0.1:5432/unused"
    engine = create_engine(url)
    assert create_read_engine(url, engine) is engine
