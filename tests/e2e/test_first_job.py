"""A newcomer's first jobs on the embedded platform, and what survives killing its parts."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.e2e.platform import EXAMPLES, running_platform
from tests.support.waiting import eventually, polled

pytestmark = pytest.mark.timeout(240)


async def test_a_server_and_two_workers_find_each_other_and_succeed(tmp_path: Path) -> None:
    async with running_platform(tmp_path / "data") as platform:
        job_id = await platform.submit((EXAMPLES / "server-workers.yaml").read_text())
        completed = await platform.completed(job_id)
        assert completed.state == "SUCCEEDED"
        detail = await platform.detail("server-workers")
        assert detail["jobStatus"]["state"] == "SUCCEEDED"
        tasks = {
            (role, t["taskIndex"]): t["taskState"]
            for role, status in detail["taskRoles"].items()
            for t in status["taskStatuses"]
        }
        assert tasks == {("server", 0): "SUCCEEDED", ("worker", 0): "SUCCEEDED", ("worker", 1): "SUCCEEDED"}
        assert "server heard from ['worker-0', 'worker-1']" in await platform.log(
            "server-workers", "server", 0
        )
        assert "reached the server at" in await platform.log("server-workers", "worker", 1)
        metrics = await eventually(
            lambda: platform.api.get(platform.info.metrics_url), lambda r: "pai_node_count" in r.text
        )
        assert "pai_service_up" in metrics.text, "Prometheus sees the platform's own health"


async def test_killing_the_orchestrator_while_tasks_run_starts_no_task_twice(tmp_path: Path) -> None:
    gate, ledger = tmp_path / "gate", tmp_path / "ledger"
    command = (
        f'echo "$PAI_CURRENT_TASK_ROLE_NAME-$PAI_TASK_INDEX" >> {ledger}; '
        f"while [ ! -f {gate} ]; do sleep 0.05; done"
    )
    job = (
        "protocolVersion: 2\nname: survivor\ntype: job\n"
        "prerequisites:\n  - {name: image, type: dockerimage, uri: python:3.11-slim}\n"
        "taskRoles:\n  worker:\n    instances: 2\n    dockerImage: image\n"
        "    resourcePerInstance: {cpu: 1, memoryMB: 128, gpu: 0}\n"
        f"    commands:\n      - '{command}'\n"
    )
    async with running_platform(tmp_path / "data") as platform:
        job_id = await platform.submit(job)
        await platform.watcher.wait_for("task.started", job_id, count=2)
        orchestrator = platform.child("orchestrator")
        old_pid = orchestrator.process.pid
        os.kill(old_pid, signal.SIGKILL)
        await eventually(
            polled(lambda: _pid(orchestrator)), lambda pid: pid != old_pid and orchestrator.restarts >= 1
        )
        gate.touch()
        completed = await platform.completed(job_id)
        assert completed.state == "SUCCEEDED"
        assert sorted(ledger.read_text().split()) == ["worker-0", "worker-1"], "each task ran exactly once"
        assert len(platform.watcher.of("task.started", job_id)) == 2


async def test_killing_nats_loses_no_job(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    job = (
        "protocolVersion: 2\nname: patient\ntype: job\n"
        "prerequisites:\n  - {name: image, type: dockerimage, uri: python:3.11-slim}\n"
        "taskRoles:\n  main:\n    dockerImage: image\n"
        "    resourcePerInstance: {cpu: 1, memoryMB: 128, gpu: 0}\n"
        f"    commands:\n      - 'while [ ! -f {gate} ]; do sleep 0.05; done'\n"
    )
    async with running_platform(tmp_path / "data") as platform:
        job_id = await platform.submit(job)
        await platform.watcher.wait_for("task.started", job_id)
        nats_child = platform.child("nats")
        old_pid = nats_child.pid
        os.kill(old_pid, signal.SIGKILL)
        # Supervised like every service: back on the same port and store by itself.
        await eventually(polled(lambda: nats_child.pid), lambda pid: pid not in (None, old_pid))
        gate.touch()
        detail = await platform.detail("patient")
        assert detail["jobStatus"]["state"] == "SUCCEEDED"
        listed = (await platform.api.get("/api/v2/jobs")).json()
        assert [j["name"] for j in listed] == ["patient"]


async def test_a_malformed_job_is_refused_with_its_problems_and_leaves_nothing(tmp_path: Path) -> None:
    bad = (
        (EXAMPLES / "hello.yaml")
        .read_text()
        .replace("gpu: 0", "gpu: -1")
        .replace("name: hello-pai", "name: h!")
    )
    async with running_platform(tmp_path / "data") as platform:
        response = await platform.api.post("/api/v2/jobs", content=bad, headers={"Content-Type": "text/yaml"})
        assert response.status_code == 400
        paths = {p["path"] for p in response.json()["problems"]}
        assert {"name", "taskRoles.main.resourcePerInstance.gpu"} <= paths
        assert (await platform.api.get("/api/v2/jobs")).json() == []


def _pid(child: object) -> int | None:
    process = getattr(child, "process", None)
    return None if process is None else int(process.pid)
