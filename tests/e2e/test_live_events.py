"""Live events at the API's address on the embedded platform: SSE through rest, and the CLI."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from httpx_sse import aconnect_sse
from typer.testing import CliRunner

from pai.cli.main import app
from tests.e2e.platform import ADMIN_PASSWORD, EXAMPLES, running_platform

pytestmark = pytest.mark.timeout(240)


async def test_a_jobs_events_reach_the_api_address_in_order_and_pai_job_submit_wait_exits_0(
    tmp_path: Path,
) -> None:
    async with running_platform(tmp_path / "data") as platform:
        env = {"PAI_CONFIG_DIR": str(tmp_path / "cli"), "PAI_PASSWORD": ADMIN_PASSWORD}
        server = ["--server", platform.info.api_url]
        runner = CliRunner()
        logged_in = await asyncio.to_thread(runner.invoke, app, ["login", *server], env=env)
        assert logged_in.exit_code == 0, logged_in.output
        waited = await asyncio.to_thread(
            runner.invoke, app, ["job", "submit", str(EXAMPLES / "hello.yaml"), "--wait", *server], env=env
        )
        assert waited.exit_code == 0, waited.output
        lines = waited.output.splitlines()
        assert lines[0].startswith("submitted admin~hello-pai")
        assert any("task main[0] started on" in line for line in lines), waited.output
        assert any("task main[0] exited with code 0" in line for line in lines), waited.output
        assert lines[-1] == "job SUCCEEDED (exit code 0)"
        unknown = await asyncio.to_thread(
            runner.invoke, app, ["job", "watch", "no-such-job", *server], env=env
        )
        assert unknown.exit_code == 1
        assert "Job admin~no-such-job is not found." in unknown.output

        # The same history over SSE at the API's own address (rest passes it to the gateway).
        types, ids = [], []
        async with aconnect_sse(
            platform.api, "GET", "/api/v2/events", params={"job": "admin~hello-pai", "since": "0"}
        ) as source:
            assert source.response.headers["content-type"].startswith("text/event-stream")
            async for message in source.aiter_sse():
                if not message.data:
                    continue  # a keep-alive comment
                types.append(message.event)
                ids.append(int(message.id))
                assert json.loads(message.data)["type"] == message.event
                if message.event == "job.completed":
                    break
        assert types[0] == "job.submitted"
        assert types[-1] == "job.completed"
        assert types.index("job.scheduled") < types.index("task.started") < types.index("task.completed")
        assert ids == sorted(ids)
        anonymous = await platform.api.get("/api/v2/events", headers={"Authorization": ""})
        assert anonymous.status_code == 401

        # Webhooks at the same address, under both of OpenPAI's prefixes.
        created = await platform.api.post(
            "/api/v2/webhooks",
            json={"url": "http://127.0.0.1:9/hook", "secret": "s", "job": "admin~hello-pai"},
        )
        assert created.status_code == 201, created.text
        listed = await platform.api.get("/rest-server/api/v2/webhooks")
        assert [hook["id"] for hook in listed.json()] == [created.json()["id"]]
