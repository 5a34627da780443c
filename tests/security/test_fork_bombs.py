"""Eight tasks forking without end take neither the machine nor the platform.

bob submits two jobs of four tasks, each task forking sleepers until the kernel refuses it. Each
task is held to its own process limit, and all tasks together to the platform's parent group
(the machine's process table less the reserve, libs/protocol/capacity.py). Meanwhile the API
answers every request within a second, and alice's job, submitted at the height of it, runs and
SUCCEEDS.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.orchestrator.adapters.confinement import CGROUP_ROOT, platform_scope
from tests.e2e.platform import running_platform
from tests.security.test_tenants import detail, submit, user_client
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(os.geteuid() != 0, reason="cgroups and tenants' uids need a root platform"),
    pytest.mark.skipif(
        not (CGROUP_ROOT / "pids" / "cgroup.procs").exists(), reason="no cgroup v1 pids controller here"
    ),
]

FORK_FOREVER = "while :; do sleep 600 & done"


@pytest.fixture
def data_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="pai-bombs-") as base:
        os.chmod(base, 0o755)
        yield Path(base) / "data"


def bombs(name: str) -> str:
    return json.dumps(
        {
            "protocolVersion": 2,
            "name": name,
            "type": "job",
            "prerequisites": [{"name": "image", "type": "dockerimage", "uri": "python:3.11-slim"}],
            "taskRoles": {
                "bomb": {
                    "instances": 4,
                    "dockerImage": "image",
                    "resourcePerInstance": {"cpu": 1, "memoryMB": 2048, "gpu": 0},
                    "commands": [FORK_FOREVER],
                }
            },
        }
    )


def _refused_forks(base: Path) -> dict[str, int]:
    """Each task group under the platform's pids group: the forks its limit refused."""
    refused: dict[str, int] = {}
    for group in base.iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            if group.is_dir():
                refused[group.name] = int((group / "pids.events").read_text().split()[1])
    return refused


async def test_eight_tasks_forking_without_end_leave_the_api_answering_and_a_third_job_succeeding(
    data_dir: Path,
) -> None:
    slowest = 0.0
    async with running_platform(data_dir, task_user="auto", env={"PAI_TASK_ENGINE": "host"}) as platform:
        base = CGROUP_ROOT / "pids" / platform_scope(data_dir)
        bob = await user_client(platform, "bob")
        alice = await user_client(platform, "alice")
        stop = asyncio.Event()

        async def ask_the_api() -> None:
            nonlocal slowest
            while not stop.is_set():
                started = time.monotonic()
                response = await platform.api.get("/api/v2/info")
                assert response.status_code == 200
                slowest = max(slowest, time.monotonic() - started)
                await asyncio.sleep(0.2)

        asking = asyncio.create_task(ask_the_api())
        try:
            for name in ("bombs-1", "bombs-2"):
                await submit(bob, bombs(name))

            async def refused() -> dict[str, int]:
                return _refused_forks(base)

            # All eight at their limit: each has had a fork refused.
            at_limit = await eventually(
                refused, lambda r: sum(1 for n in r.values() if n > 0) >= 8, within=150, every=0.5
            )
            assert len(at_limit) >= 8
            assert int((base / "pids.current").read_text()) <= int((base / "pids.max").read_text())

            await submit(
                alice,
                json.dumps({**json.loads(bombs("third")), "name": "third"})
                .replace(FORK_FOREVER, "echo the third job ran")
                .replace('"instances": 4', '"instances": 1'),
            )
            third = await detail(alice, "alice", "third")
            assert third["jobStatus"]["state"] == "SUCCEEDED", third
            for name in ("bombs-1", "bombs-2"):
                still = (await bob.get(f"/api/v2/jobs/bob~{name}")).json()
                assert still["jobStatus"]["state"] == "RUNNING", still
        finally:
            stop.set()
            with contextlib.suppress(AssertionError):
                await asking
            for name in ("bombs-1", "bombs-2"):
                await bob.put(f"/api/v2/jobs/bob~{name}/executionType", json={"value": "STOP"})
            await bob.aclose()
            await alice.aclose()
        for name in ("bombs-1", "bombs-2"):
            stopped = await detail(platform.api, "bob", name)
            assert stopped["jobStatus"]["state"] == "STOPPED", stopped
    asking.result()
    print(f"the slowest answer of GET /api/v2/info while eight tasks forked: {slowest * 1000:.0f} ms")
    assert slowest < 1.0, f"the API took {slowest:.2f}s to answer"
