"""First start and restarts: the admin account, the token secret and the schema persist."""

from __future__ import annotations

import stat
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from services.rest.app import build_app
from services.rest.settings import RestSettings


async def started(settings: RestSettings) -> TestClient[Any, Any]:
    client: TestClient[Any, Any] = TestClient(TestServer(build_app(settings)))
    await client.start_server()
    return client


async def test_a_generated_admin_password_and_tokens_survive_a_restart(rest_settings: RestSettings) -> None:
    settings = rest_settings.model_copy(update={"admin_password": None})
    first = await started(settings)
    try:
        password_file = settings.data_dir / "admin-password"
        assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
        password = password_file.read_text().strip()
        assert len(password) >= 16
        response = await first.post(
            "/api/v2/authn/basic/login", data={"username": "admin", "password": password}
        )
        assert response.status == 200
        token = (await response.json())["token"]
    finally:
        await first.close()
    secret_file = settings.resolved_jwt_secret_file()
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600

    second = await started(settings.model_copy(update={"admin_password": "ignored-once-admin-exists"}))
    try:
        assert password_file.read_text().strip() == password
        listed = await second.get("/api/v2/jobs", headers={"Authorization": f"Bearer {token}"})
        assert listed.status == 200
        assert await listed.json() == []
    finally:
        await second.close()


def test_the_default_database_is_sqlite_in_the_data_dir(tmp_path: Any) -> None:
    settings = RestSettings(data_dir=tmp_path)
    assert settings.resolved_database_url() == f"sqlite+aiosqlite:///{tmp_path.resolve() / 'rest.db'}"
    assert settings.rest_port == 9186
