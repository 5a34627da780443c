"""Forked by the fork server or spawned without it, a task finds none of the platform's settings.

The executor has two ways to start a task's runtime: the fork server (started with the task
environment of isolation.py) and, where there is none (`fork_server=False`, or three servers
in a row that forked nothing), a new interpreter of its own. Each must hand the task only that
environment, never the orchestrator's: the bus URL and credentials, the data dir, the database.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import psutil
import pytest

from services.orchestrator.adapters.executing import TaskExit
from services.orchestrator.adapters.local import LocalExecutor
from services.orchestrator.core.deciders import decide
from services.orchestrator.core.effects import Context
from services.orchestrator.core.frameworks import Framework, TaskKey
from tests.orchestrator.jobs import job_config
from tests.orchestrator.sim import T0, scheduled, submitted

KEY = TaskKey(0, "worker", 0, 0)
PLATFORM_ONLY = {
    "PAI_NATS_URL": "nats://127.0.0.1:4222",
    "PAI_NATS_USER": "orchestrator",
    "PAI_NATS_PASSWORD": "bus-password-of-the-orchestrator",
    "PAI_DATA_DIR": "/var/lib/pai-of-the-orchestrator",
    "PAI_DATABASE_URL": "postgresql://pai:db-password@db/pai",
    "PAI_SECRETS_KEY": "key-that-seals-every-job-secret",
    "PAI_EVENTS_URL": "http://127.0.0.1:9190/events-of-the-platform",
}


async def no_secrets(_job_id: str) -> dict[str, Any] | None:
    return None


def our_child(pid: int) -> bool:
    """The runtime is this process's child: spawned here, not forked by the fork server. Until
    this process reaps it (on the event loop, which has not run since the start), it stays."""
    try:
        return psutil.Process(pid).ppid() == os.getpid()
    except psutil.NoSuchProcess:
        return False  # reaped already: not by this process, so by the fork server


@pytest.mark.parametrize("fork_server", [True, False], ids=["forked by the fork server", "spawned"])
async def test_a_task_started_either_way_finds_no_platform_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fork_server: bool
) -> None:
    for name, value in PLATFORM_ONLY.items():
        monkeypatch.setenv(name, value)
    exits: asyncio.Queue[TaskExit] = asyncio.Queue()
    executor = LocalExecutor(
        tmp_path / "data", exits.put, no_secrets, poll_seconds=0.05, fork_server=fork_server
    )
    config = job_config({"worker": (1, "env")})
    framework: Framework | None = decide(None, submitted(config), Context(now=T0)).framework
    framework = decide(framework, scheduled(config), Context(now=T0)).framework
    assert framework is not None
    try:
        pid, directory = await executor.start(framework, KEY)
        assert our_child(pid) is not fork_server  # each case takes the path it names
        done = await asyncio.wait_for(exits.get(), 60)
    finally:
        await executor.close()
    assert done.exit_code == 0
    seen = (directory / "logs" / "user.pai.stdout").read_text()
    assert "PAI_JOB_NAME=" in seen  # the task's own variables are there
    for name, value in PLATFORM_ONLY.items():
        assert f"{name}=" not in seen
        assert value not in seen
