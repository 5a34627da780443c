"""A task reads its environment looking for the bus or the data dir: neither is there."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

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
    "PAI_DATA_DIR": "/var/lib/pai",
    "PAI_DATABASE_URL": "postgresql://pai:db-password@db/pai",
    "AWS_SECRET_ACCESS_KEY": "cloud-key",
}


async def no_secrets(_job_id: str) -> dict[str, Any] | None:
    return None


async def run_one(tmp_path: Path, command: str) -> tuple[TaskExit, Path]:
    exits: asyncio.Queue[TaskExit] = asyncio.Queue()
    executor = LocalExecutor(tmp_path / "data", exits.put, no_secrets, poll_seconds=0.05)
    config = job_config({"worker": (1, command)})
    framework: Framework | None = decide(None, submitted(config), Context(now=T0)).framework
    framework = decide(framework, scheduled(config), Context(now=T0)).framework
    assert framework is not None
    try:
        _, directory = await executor.start(framework, KEY)
        done = await asyncio.wait_for(exits.get(), 60)
    finally:
        await executor.close()
    return done, directory


async def test_no_platform_setting_reaches_a_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in PLATFORM_ONLY.items():
        monkeypatch.setenv(name, value)
    done, directory = await run_one(tmp_path, "env")
    assert done.exit_code == 0
    seen = (directory / "logs" / "user.pai.stdout").read_text()
    assert "PAI_JOB_NAME=" in seen  # the task's own variables are there
    for name, value in PLATFORM_ONLY.items():
        assert name not in seen
        assert value not in seen
    assert str(tmp_path / "data") + "\n" not in seen
