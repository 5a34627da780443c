"""The embedded bus killed mid-run: supervised back, the API keeps answering, no job is lost."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.platform import job_yaml, running_platform
from tests.support.waiting import eventually, polled

pytestmark = pytest.mark.timeout(240)


def gated(name: str, gate: Path) -> str:
    return job_yaml(name, {"main": {"commands": [f"while [ ! -f {gate} ]; do sleep 0.05; done"]}})


async def test_kill_9_of_the_bus_mid_run_the_api_answers_and_jobs_before_and_after_succeed(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    async with running_platform(tmp_path / "data") as platform:
        before = await platform.submit(gated("before-kill", gate))
        await platform.watcher.wait_for("task.started", before)
        nats_child = platform.child("nats")
        old_pid = nats_child.pid
        assert old_pid is not None

        os.kill(old_pid, signal.SIGKILL)
        killed = time.monotonic()
        async with httpx.AsyncClient(base_url=platform.info.api_url, timeout=1.0) as fresh:

            async def info_status() -> int:
                try:
                    return (await fresh.get("/api/v2/info")).status_code
                except httpx.TransportError:
                    return 0

            await eventually(info_status, lambda status: status == 200, within=5.0)
        assert time.monotonic() - killed < 5.0
        # The bus is supervised: a new server on the same port and store, by itself.
        await eventually(polled(lambda: nats_child.pid), lambda pid: pid not in (None, old_pid), within=5)

        async def submit_after() -> httpx.Response:
            return await platform.api.post(
                "/api/v2/jobs", content=gated("after-kill", gate), headers={"Content-Type": "text/yaml"}
            )

        # A submission while the bus is still coming back is refused with 503, never lost.
        answer = await eventually(submit_after, lambda r: r.status_code != 503, within=30)
        assert answer.status_code == 202, answer.text
        gate.touch()
        for name in ("before-kill", "after-kill"):
            detail = await platform.detail(name)
            assert detail["jobStatus"]["state"] == "SUCCEEDED", detail
