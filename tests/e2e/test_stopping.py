"""Ctrl-C (SIGINT) or SIGTERM to `pai up` stops every process of the platform, bus up or down.

Running tasks are not the platform: they keep running and the next `pai up` adopts them, as
`pai up --help` and the stop message say.
"""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path

import httpx
import psutil
import pytest
from typer.testing import CliRunner

from pai.cli.main import app
from pai.embedded.platform import task_runtimes
from tests.e2e.platform import job_yaml
from tests.e2e.up_process import UpProcess, gone
from tests.support.waiting import eventually, polled

pytestmark = pytest.mark.timeout(240)


def test_the_help_says_what_happens_to_running_tasks() -> None:
    result = CliRunner().invoke(app, ["up", "--help"], terminal_width=200)
    text = " ".join(result.stdout.split())
    assert "a second Ctrl-C kills them at once" in text
    assert "Running tasks are not stopped" in text
    assert "adopts them" in text


async def test_sigint_with_the_bus_killed_stops_every_process_within_10_s(tmp_path: Path) -> None:
    up = UpProcess(tmp_path / "data").start()
    tasks: list[psutil.Process] = []
    try:
        await up.wait_until_up()
        platform = up.descendants()
        assert len(platform) >= 6, [p.cmdline() for p in platform]  # the bus and five services
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{up.port}", timeout=30) as api:
            login = await api.post(
                "/api/v2/authn/basic/login", json={"username": "admin", "password": "up-admin-pass"}
            )
            api.headers["Authorization"] = f"Bearer {login.json()['token']}"
            submitted = await api.post(
                "/api/v2/jobs",
                content=job_yaml("long", {"main": {"commands": ["sleep 300"]}}),
                headers={"Content-Type": "text/yaml"},
            )
            assert submitted.status_code == 202, submitted.text
            tasks = await eventually(polled(lambda: task_runtimes(tmp_path / "data")), bool, within=60)

        up.child_named("nats-server").kill()
        asked = time.monotonic()
        up.signal(signal.SIGINT)
        await eventually(polled(lambda: gone(platform)), bool, within=10)
        assert up.process is not None
        await eventually(polled(up.process.poll), lambda code: code is not None, within=10)
        print(f"every platform process gone {time.monotonic() - asked:.1f} s after SIGINT")
        assert "stopped" in up.text()
        # The task is not the platform: it runs on, and the message says who picks it up.
        assert all(task.is_running() for task in tasks)
        assert "1 task process(es) keep running" in up.text()
        assert "adopts them" in up.text()
    finally:
        up.cleanup()
        for task in tasks:
            with contextlib.suppress(psutil.NoSuchProcess):
                for process in [*task.children(recursive=True), task]:
                    process.kill()


async def test_a_second_sigint_kills_every_process_at_once(tmp_path: Path) -> None:
    up = UpProcess(tmp_path / "data").start()
    try:
        await up.wait_until_up()
        platform = up.descendants()
        up.signal(signal.SIGINT)
        await eventually(polled(up.text), lambda text: "stopping" in text, within=10)
        up.signal(signal.SIGINT)
        await eventually(polled(lambda: gone(platform)), bool, within=10)
        assert "killing every process now" in up.text()
    finally:
        up.cleanup()
