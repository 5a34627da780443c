"""The orchestrator's exec socket (adapters/entering.py) on a task directory whose lock is held, as
a running task's is: the command's output and exit code, its end when the client leaves or the
task ends, and a refusal for a task that does not run."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest
from aiohttp.test_utils import TestClient, TestServer

from libs.web.exec_stream import STDOUT, read_control
from services.orchestrator.adapters.entering import ExecSettings, exec_app
from services.orchestrator.adapters.local import runtime_path
from services.orchestrator.adapters.specs import LOCK_FILE, SPEC_FILE
from tests.runtime.helpers import role, spec_for

pytestmark = pytest.mark.timeout(60)
JOB = "job-1"


@pytest.fixture
def task(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A task directory with its spec, and its lock held (by this test, for the task's runtime)."""
    directory = tmp_path / "jobs" / JOB / "attempt-0" / "worker-0" / "try-0"
    spec = spec_for(directory.parent.parent, "worker", 0, [role("worker")], "sleep 60")
    spec["dirs"]["work_dir"] = str(directory / "work")
    (directory / "work").mkdir(parents=True)
    (directory / SPEC_FILE).write_text(json.dumps(spec))
    lock = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        yield directory, lock
    finally:
        os.close(lock)


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[TestClient[Any, Any]]:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": runtime_path()}
    app = exec_app(ExecSettings(tmp_path, lambda: env, poll_s=0.1))
    async with TestClient(TestServer(app)) as client:
        yield client


def _query(*command: str) -> list[tuple[str, str]]:
    return [("job_id", JOB), ("role", "worker"), ("index", "0"), *(("command", c) for c in command)]


async def _messages(ws: aiohttp.ClientWebSocketResponse) -> tuple[list[dict[str, Any]], bytes]:
    said, out = [], b""
    async for message in ws:
        if message.type == aiohttp.WSMsgType.TEXT:
            said.append(read_control(message.data) or {})
        elif message.type == aiohttp.WSMsgType.BINARY and message.data[0] == STDOUT:
            out += message.data[1:]
    return said, out


def _sleeping(marker: str) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]


async def test_a_command_in_a_running_task_says_it_started_its_output_then_its_exit_code(
    client: TestClient[Any, Any], task: tuple[Path, int]
) -> None:
    async with client.ws_connect(
        "/exec", params=_query("sh", "-c", 'echo "$PAI_JOB_NAME in $(pwd)"; exit 4')
    ) as ws:
        said, out = await _messages(ws)
    assert said == [{"type": "started"}, {"type": "exit", "code": 4}]
    assert out.decode() == f"alice~demo in {task[0] / 'work'}\n"


async def test_the_command_ends_when_its_client_leaves(
    client: TestClient[Any, Any], task: tuple[Path, int]
) -> None:
    marker = "31.2345"
    ws = await client.ws_connect("/exec", params=_query("sh", "-c", f"echo up; sleep {marker}"))
    assert read_control((await ws.receive()).data) == {"type": "started"}
    assert (await ws.receive()).data == bytes([STDOUT]) + b"up\n"
    assert _sleeping(marker)
    await ws.close()
    deadline = time.monotonic() + 10
    while _sleeping(marker) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert _sleeping(marker) == []


async def test_the_command_ends_when_its_task_ends(
    client: TestClient[Any, Any], task: tuple[Path, int]
) -> None:
    async with client.ws_connect("/exec", params=_query("sleep", "30")) as ws:
        assert read_control((await ws.receive()).data) == {"type": "started"}
        fcntl.flock(task[1], fcntl.LOCK_UN)  # the task's runtime is gone
        said, _out = await asyncio.wait_for(_messages(ws), 15)
    assert said[-1]["type"] == "exit"
    assert said[-1]["code"] != 0


async def test_a_task_that_does_not_run_is_refused_before_anything_runs(
    client: TestClient[Any, Any], task: tuple[Path, int]
) -> None:
    fcntl.flock(task[1], fcntl.LOCK_UN)
    async with client.ws_connect("/exec", params=_query("id")) as ws:
        said, _out = await _messages(ws)
    assert said == [
        {"type": "error", "status": 409, "message": "task worker[0] is not running: it has ended"}
    ]
    async with client.ws_connect("/exec", params=[("job_id", JOB), ("role", "worker"), ("index", "0")]) as ws:
        said, _ = await _messages(ws)
    assert said[0]["status"] == 400
