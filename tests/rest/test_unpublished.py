"""A row whose job.submitted never reached the bus (REST killed in between) is published later."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from libs.backbone.natsserver import EmbeddedNats
from libs.protocol.events import JobSubmitted, decode_event
from libs.protocol.subjects import JOBS_STREAM, job_subject
from services.rest.adapters.unpublished import GRACE_SECONDS, repair_once
from services.rest.app import build_app
from services.rest.core.totals import job_row_from_config
from services.rest.keys import BUS, ENGINE, JOB_INSERTER
from services.rest.settings import RestSettings
from tests.rest.conftest import ADMIN_PASSWORD
from tests.rest.jobs import job_yaml
from tests.support.jobs import job_model


async def test_an_orphan_row_is_published_once_and_a_published_job_is_left_alone(
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
        headers = {"Authorization": f"Bearer {(await login.json())['token']}", "Content-Type": "text/yaml"}
        assert (await api.post("/api/v2/jobs", data=job_yaml("normal"), headers=headers)).status == 202

        # What a REST process killed after the row and before the publish leaves behind.
        orphan = JobSubmitted(
            job_id="orphan1",
            user="admin",
            name="orphan",
            virtual_cluster="default",
            config=job_model({"name": "orphan"}),
        )
        old = int((time.time() - GRACE_SECONDS - 5) * 1000)
        await api.app[JOB_INSERTER].insert(job_row_from_config(orphan, old))
        young = JobSubmitted(
            job_id="young1",
            user="admin",
            name="young",
            virtual_cluster="default",
            config=job_model({"name": "young"}),
        )
        await api.app[JOB_INSERTER].insert(job_row_from_config(young, int(time.time() * 1000)))

        rest_bus = api.app[BUS]
        js = rest_bus.bus.js
        before = (await js.stream_info(JOBS_STREAM)).state.messages
        seen: set[str] = set()
        assert await repair_once(api.app[ENGINE], rest_bus, seen) == 1
        message = await js.get_last_msg(JOBS_STREAM, job_subject("orphan1", "job.submitted"))
        event = decode_event(message.data or b"")
        assert isinstance(event, JobSubmitted)
        assert (event.user, event.name) == ("admin", "orphan")
        assert (await js.stream_info(JOBS_STREAM)).state.messages == before + 1, "only the orphan"
        assert await repair_once(api.app[ENGINE], rest_bus, set()) == 0, "published once, found next time"
    finally:
        await api.close()
