"""A REST app on SQLite for the attack tests, with an admin signed in; fixtures stay per module."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from libs.backbone.natsserver import EmbeddedNats
from services.rest.app import build_app
from services.rest.settings import RestSettings

ADMIN_PASSWORD = "admin-secret-1"
Client = TestClient[Any, Any]


def settings_for(tmp_path: Path, nats: EmbeddedNats, **changes: Any) -> RestSettings:
    return RestSettings(
        nats_url=nats.url,
        data_dir=tmp_path / "data",
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'rest.db'}",
        admin_password=ADMIN_PASSWORD,
        log_format="console",
        **changes,
    )


@asynccontextmanager
async def serving(settings: RestSettings) -> AsyncIterator[tuple[Client, dict[str, str]]]:
    """The running app and the admin's headers."""
    client: Client = TestClient(TestServer(build_app(settings)))
    await client.start_server()
    try:
        login = await client.post(
            "/api/v2/authn/basic/login", json={"username": "admin", "password": ADMIN_PASSWORD}
        )
        assert login.status == 200, await login.text()
        yield client, {"Authorization": f"Bearer {(await login.json())['token']}"}
    finally:
        await client.close()


def one_role_job(name: str, *, instances: object = 1, **resources: object) -> str:
    """Job YAML with one task role; values are written as given, so 10**30 stays a YAML integer."""
    res = {"cpu": 1, "memoryMB": 256, "gpu": 0, **resources}
    listed = ", ".join(f"{key}: {value}" for key, value in res.items())
    return f"""protocolVersion: 2
name: {name}
type: job
prerequisites:
  - {{name: image, type: dockerimage, uri: "python:3.11"}}
taskRoles:
  worker:
    instances: {instances}
    dockerImage: image
    resourcePerInstance: {{{listed}}}
    commands: [echo hello]
"""
