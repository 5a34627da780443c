"""With the bus down, REST answers reads from SQL and refuses bus writes with 503 and Retry-After."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from libs.backbone.natsserver import EmbeddedNats
from services.rest.app import build_app
from services.rest.keys import BUS
from services.rest.settings import RestSettings
from tests.rest.conftest import ADMIN_PASSWORD
from tests.rest.jobs import job_yaml
from tests.support.waiting import eventually, polled

pytestmark = pytest.mark.timeout(60)
YAML = {"Content-Type": "text/yaml"}
JOB = "/api/v2/jobs/admin~before"


async def test_reads_answer_and_bus_writes_are_refused_with_503_while_the_bus_is_down(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    settings = RestSettings(
        nats_url=nats_server.url,
        data_dir=tmp_path / "data",
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'rest.db'}",
        admin_password=ADMIN_PASSWORD,
        log_format="console",
    )
    api: TestClient[Any, Any] = TestClient(TestServer(build_app(settings)))
    await api.start_server()
    try:
        login = await api.post(
            "/api/v2/authn/basic/login", data={"username": "admin", "password": ADMIN_PASSWORD}
        )
        headers = {"Authorization": f"Bearer {(await login.json())['token']}"}
        accepted = await api.post("/api/v2/jobs", data=job_yaml("before"), headers={**headers, **YAML})
        assert accepted.status == 202
        await eventually(lambda: api.get(JOB, headers=headers), lambda r: r.status == 200)

        nats_server.kill_sync()
        rest_bus = api.app[BUS].bus
        await eventually(polled(lambda: rest_bus.is_connected), lambda up: not up)

        # Reads from the read model still answer.
        for path in ("/api/v2/info", "/api/v2/jobs", JOB, JOB + "/config", "/api/v2/users"):
            response = await api.get(path, headers=headers)
            assert response.status == 200, (path, await response.text())
        listed = await (await api.get("/api/v2/jobs", headers=headers)).json()
        assert [j["name"] for j in listed] == ["before"]

        # What needs the bus is refused at once, in OpenPAI's error shape, with Retry-After.
        refused = [
            await api.post("/api/v2/jobs", data=job_yaml("during"), headers={**headers, **YAML}),
            await api.put(JOB + "/executionType", json={"value": "STOP"}, headers=headers),
            await api.get("/api/v2/virtual-clusters", headers=headers),
            await api.get("/api/v2/alerts", headers=headers),
            await api.get("/api/v2/alerts/recent", headers=headers),
            await api.get("/api/v2/alerts/rules", headers=headers),
            await api.get("/api/v2/cluster/metrics", headers=headers),
            await api.get(JOB + "/metrics", headers=headers),
        ]
        for response in refused:
            body = await response.json()
            assert response.status == 503, body
            assert body["code"] == "ServiceUnavailableError"
            assert "the message bus is down" in body["message"]
            assert int(response.headers["Retry-After"]) > 0
        # Invalid input is still a 400, not a 503: validation needs no bus.
        invalid = await api.post("/api/v2/jobs", data="name: x", headers={**headers, **YAML})
        assert invalid.status == 400
        # The refused job left nothing behind.
        listed = await (await api.get("/api/v2/jobs", headers=headers)).json()
        assert [j["name"] for j in listed] == ["before"]

        # Back up: the same submission is accepted.
        await nats_server.start()
        await eventually(polled(lambda: rest_bus.is_connected), bool)
        again = await api.post("/api/v2/jobs", data=job_yaml("during"), headers={**headers, **YAML})
        assert again.status == 202, await again.text()
    finally:
        await api.close()
