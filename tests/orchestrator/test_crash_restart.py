"""Crash safety: kill -9 the orchestrator while tasks run, restart it, and the job still completes.

The orchestrator runs as a real process (`python -m services.orchestrator`). One task ends while
it is down (its end is reported from the runtime's result file after the restart), the other is
still running at the restart (it is adopted and watched). No task is started a second time.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from libs.backbone.connecting import Bus
from libs.backbone.natsserver import EmbeddedNats
from libs.protocol.events import JobState
from tests.orchestrator.jobs import job_config
from tests.orchestrator.service_support import submit, watch_jobs

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
async def launch(nats_server: EmbeddedNats, tmp_path: Path) -> AsyncIterator[Callable[[], object]]:
    processes: list[asyncio.subprocess.Process] = []
    files: list[int] = []
    env = {
        **os.environ,
        "PAI_NATS_URL": nats_server.url,
        "PAI_DATA_DIR": str(tmp_path / "data"),
        "PAI_LOG_FORMAT": "json",
        "PAI_ADOPT_POLL_SECONDS": "0.05",
        "PAI_STOP_GRACE_SECONDS": "2",
        "PYTHONPATH": str(REPO),
    }

    def log_file(path: Path) -> int:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        files.append(fd)
        return fd

    async def start() -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "services.orchestrator",
            cwd=str(REPO),
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=log_file(tmp_path / f"orchestrator-{len(processes)}.log"),
        )
        processes.append(proc)
        return proc

    yield start
    for proc in processes:
        if proc.returncode is None:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 30)
    for fd in files:
        os.close(fd)


async def wait_for_path(path: Path, within: float = 60) -> None:
    for _ in range(int(within / 0.05)):
        if await asyncio.to_thread(path.exists):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


async def test_a_killed_orchestrator_restarts_and_no_task_runs_twice(
    bus: Bus, launch: Callable[[], object], tmp_path: Path
) -> None:
    events = await watch_jobs(bus)
    first = await launch()  # type: ignore[misc]
    # Task 0 is short, task 1 long; the role succeeds only once both have succeeded.
    config = job_config({"worker": (2, 'if [ "$PAI_TASK_INDEX" = 0 ]; then sleep 0.2; else sleep 3; fi')})
    await submit(bus, "crash1", config)
    started = await events.wait_for("task.started", "crash1", count=2)
    first.kill()  # kill -9: no cleanup at all
    await first.wait()
    attempt_dir = tmp_path / "data" / "jobs" / "crash1" / "attempt-0"
    # The short task ends while nobody watches; the long one is still running at the restart.
    await wait_for_path(attempt_dir / "worker-0" / "try-0" / "logs" / "runtime-result.json")
    assert not (attempt_dir / "worker-1" / "try-0" / "logs" / "runtime-result.json").exists()
    await launch()  # type: ignore[misc]
    done = (await events.wait_for("job.completed", "crash1"))[0]
    assert done.state is JobState.SUCCEEDED
    assert len(events.of("task.started", "crash1")) == 2
    assert sorted((e.index, e.exit_code) for e in events.of("task.completed", "crash1")) == [(0, 0), (1, 0)]
    for index in (0, 1):
        assert sorted(p.name for p in (attempt_dir / f"worker-{index}").iterdir()) == ["try-0"]
    pids = {e.index: e.pid for e in started}
    assert int((attempt_dir / "worker-1" / "try-0" / "pid").read_text()) == pids[1]
