"""A REST service on SQLite for the attack tests, one per test module, with an admin signed in.

The service runs on a real port in a thread (tests/rest/serving.py), so a module's attacks share
one service, as attacks on a real cluster would, and each attack is followed by a request that
shows the service still answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from libs.backbone.natsserver import EmbeddedNats
from services.rest.settings import RestSettings
from tests.rest.serving import ServerThread

ADMIN_PASSWORD = "admin-secret-1"


def settings_for(tmp_path: Path, nats: EmbeddedNats, **changes: Any) -> RestSettings:
    values: dict[str, Any] = {
        "nats_url": nats.url,
        "data_dir": tmp_path / "data",
        "database_url": f"sqlite+aiosqlite:///{tmp_path / 'rest.db'}",
        "admin_password": ADMIN_PASSWORD,
        "log_format": "console",
        # One test client sends many requests; OpenPAI's per-address and per-user counts are
        # not what these tests are about.
        "rate_limit_api_per_min": 0,
        "rate_limit_submit_job_per_hour": 0,
        **changes,
    }
    return RestSettings(**values)


@contextmanager
def rest_service(tmp_path: Path, **changes: Any) -> Iterator[tuple[ServerThread, dict[str, str]]]:
    """A nats-server and the REST service over it; yields the server and the admin's headers."""
    nats = EmbeddedNats(tmp_path / "nats")
    nats.start_sync()
    try:
        server = ServerThread(settings_for(tmp_path, nats, **changes)).start()
        try:
            login = httpx.post(
                f"{server.url}/api/v2/authn/basic/login",
                json={"username": "admin", "password": ADMIN_PASSWORD},
                timeout=30,
            )
            assert login.status_code == 200, login.text
            yield server, {"Authorization": f"Bearer {login.json()['token']}"}
        finally:
            server.stop()
    finally:
        nats.kill_sync()


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


def error_of(response: httpx.Response) -> tuple[int, dict[str, Any]]:
    """Status and body of an error, which is always JSON in OpenPAI's {code, message} shape."""
    assert response.headers["content-type"].startswith("application/json"), response.text
    body = response.json()
    assert {"code", "message"} <= set(body), body
    return response.status_code, body
