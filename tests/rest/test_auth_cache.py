"""Remembered token checks: no SQL on a repeated check, yet every account change applies at once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, update
from sqlalchemy.ext.asyncio import AsyncEngine

from services.rest.adapters import accounts
from services.rest.adapters.auth import ensure_admin
from services.rest.adapters.auth_cache import CachedTokens, changes_accounts
from services.rest.adapters.database import create_engine, migrate
from services.rest.adapters.tables import jobs, tokens


@pytest.fixture
async def engine(database_url: str, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url)
    await migrate(engine)
    await ensure_admin(engine, "admin", "admin-secret-1", tmp_path)
    try:
        yield engine
    finally:
        await engine.dispose()


def count_statements(engine: AsyncEngine) -> list[int]:
    seen = [0]

    def on_execute(*_args: Any) -> None:
        seen[0] += 1

    event.listen(engine.sync_engine, "before_cursor_execute", on_execute)
    return seen


@pytest.mark.parametrize(
    ("statement", "changes"),
    [
        ("SELECT tokens.kind FROM tokens WHERE tokens.jti = ?", False),
        ("INSERT INTO jobs (id, username) VALUES (?, ?)", False),
        ("UPDATE job_attempts SET state=? WHERE job_attempts.job_id = ?", False),
        ("DELETE FROM jobs WHERE jobs.id = ?", False),
        ("INSERT INTO applied_events (event_id, job_id, applied_at) VALUES ($1, $2, $3)", False),
        ("UPDATE tokens SET revoked=? WHERE tokens.jti = ?", True),
        ('DELETE FROM "groups" WHERE "groups".groupname = ?', True),
        ("INSERT INTO user_groups (username, groupname) VALUES (?, ?)", True),
        ("INSERT INTO jobs_archive SELECT * FROM jobs", True),
        ("CREATE TABLE something (id INTEGER)", True),
    ],
)
def test_only_reads_and_read_model_writes_keep_remembered_checks(statement: str, changes: bool) -> None:
    assert changes_accounts(statement) is changes


async def test_a_repeated_check_runs_no_sql(engine: AsyncEngine) -> None:
    checker = CachedTokens.over(engine, "s" * 48, ttl=60.0)
    token = await checker.issue("admin", True, 3600)
    first = await checker.check(token)
    assert first is not None
    assert first.username == "admin"
    assert first.admin
    statements = count_statements(engine)
    assert await checker.check(token) == first
    assert statements[0] == 0
    # Writes to the job read model do not forget it.
    async with engine.begin() as conn:
        await conn.execute(update(jobs).where(jobs.c.id == "none").values(state="RUNNING"))
    statements[0] = 0
    assert await checker.check(token) == first
    assert statements[0] == 0


async def test_a_revoked_token_is_refused_at_once(engine: AsyncEngine) -> None:
    checker = CachedTokens.over(engine, "s" * 48, ttl=60.0)
    token = await checker.issue("admin", True, 3600)
    principal = await checker.check(token)
    assert principal is not None
    await accounts.revoke_token(engine, principal.token_id)
    assert await checker.check(token) is None


async def test_a_check_running_during_an_account_write_is_not_remembered(engine: AsyncEngine) -> None:
    checker = CachedTokens.over(engine, "s" * 48, ttl=60.0)
    token = await checker.issue("admin", True, 3600)
    assert checker.writes is not None
    writes = checker.writes
    # A write to the tokens table lands while the check is reading (before its answer is kept).
    original = writes.generation

    def write_during(*_args: Any) -> None:
        if writes.generation == original:
            writes.generation += 1

    event.listen(engine.sync_engine, "before_cursor_execute", write_during)
    assert await checker.check(token) is not None
    event.remove(engine.sync_engine, "before_cursor_execute", write_during)
    statements = count_statements(engine)
    assert await checker.check(token) is not None
    assert statements[0] > 0


async def test_an_account_write_counts_again_when_its_connection_returns(engine: AsyncEngine) -> None:
    checker = CachedTokens.over(engine, "s" * 48, ttl=60.0)
    assert checker.writes is not None
    before = checker.writes.generation
    async with engine.begin() as conn:
        await conn.execute(update(tokens).where(tokens.c.jti == "none").values(revoked=True))
        during = checker.writes.generation
    assert before < during < checker.writes.generation


async def test_without_a_memory_every_check_reads_the_database(engine: AsyncEngine) -> None:
    checker = CachedTokens.over(engine, "s" * 48, ttl=0)
    token = await checker.issue("admin", True, 3600)
    assert await checker.check(token) is not None
    statements = count_statements(engine)
    assert await checker.check(token) is not None
    assert statements[0] > 0
