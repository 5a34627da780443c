"""Fixtures of the REST service tests: a SQL backend (SQLite and PostgreSQL), the running app.

Every test that uses ``api`` runs twice, once per backend. PostgreSQL gets one fresh database
per test module (unique name, dropped at the end) and an empty schema per test, so the
service's migrations run from scratch each time. PostgreSQL tests are skipped when no server
answers on 127.0.0.1:5432.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]  # asyncpg ships no type hints
import pytest
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy.ext.asyncio import AsyncEngine

from libs.backbone.natsserver import EmbeddedNats
from services.rest.adapters.database import create_engine, migrate
from services.rest.app import build_app
from services.rest.settings import RestSettings
from tests.rest.fake_idp import FakeIdp
from tests.rest.serving import ServerThread

PG_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
ADMIN_PASSWORD = "admin-secret-1"


def _pg_available() -> bool:
    async def probe() -> bool:
        try:
            conn = await asyncpg.connect(PG_ADMIN_DSN, timeout=2)
        except (OSError, asyncpg.PostgresError, TimeoutError):
            return False
        await conn.close()
        return True

    return asyncio.run(probe())


@pytest.fixture(scope="module")
def pg_database() -> Iterator[str]:
    """A fresh PostgreSQL database for this module; its DSN (asyncpg form)."""
    if not _pg_available():
        pytest.skip("no PostgreSQL on 127.0.0.1:5432")
    name = f"pai_rest_test_{uuid.uuid4().hex[:12]}"

    async def run(sql: str) -> None:
        conn = await asyncpg.connect(PG_ADMIN_DSN)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(run(f'CREATE DATABASE "{name}"'))
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        asyncio.run(run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'rest.db'}"
    dsn: str = request.getfixturevalue("pg_database")

    async def reset() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public;")
        finally:
            await conn.close()

    asyncio.run(reset())
    return dsn.replace("postgresql://", "postgresql+asyncpg://", 1)


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """The read model's engine on the backend, its schema migrated, and nothing else running."""
    engine = create_engine(database_url)
    await migrate(engine)
    try:
        yield engine
    finally:
        await engine.dispose()


@pytest.fixture
def rest_settings(tmp_path: Path, nats_server: EmbeddedNats, database_url: str) -> RestSettings:
    return RestSettings(
        nats_url=nats_server.url,
        data_dir=tmp_path / "data",
        database_url=database_url,
        admin_password=ADMIN_PASSWORD,
        logs_timeout_seconds=0.5,
        log_format="console",
        # These tests read job details without signing in, as OpenPAI allows; the private default
        # of a new cluster is what test_authz_matrix.py and tests/security/test_job_privacy.py check.
        job_detail_public=True,
    )


@pytest.fixture
async def api(rest_settings: RestSettings) -> AsyncIterator[TestClient[Any, Any]]:
    """An HTTP client to the running REST app (started with its cleanup contexts)."""
    client: TestClient[Any, Any] = TestClient(TestServer(build_app(rest_settings)))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def admin_headers(api: TestClient[Any, Any]) -> dict[str, str]:
    response = await api.post(
        "/api/v2/authn/basic/login", data={"username": "admin", "password": ADMIN_PASSWORD}
    )
    assert response.status == 200, await response.text()
    token = (await response.json())["token"]
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def server(rest_settings: RestSettings) -> Iterator[ServerThread]:
    """The REST app served from a thread on a real port, for synchronous clients (the CLI, httpx)."""
    thread = ServerThread(rest_settings).start()
    try:
        yield thread
    finally:
        thread.stop()


@pytest.fixture
async def idp() -> AsyncIterator[FakeIdp]:
    """A fake OpenID Connect provider on a free port (tests/rest/fake_idp.py)."""
    provider = await FakeIdp().start()
    try:
        yield provider
    finally:
        await provider.close()
