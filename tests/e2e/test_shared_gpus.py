"""`pai up --gpus 2`: four tasks asking half a GPU each run at once, two per GPU, each seeing its share."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from pai.cli.main import app
from tests.e2e.up_process import UpProcess
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(240)
LOG = "/api/v2/jobs/admin~halves/attempts/0/taskRoles/infer/taskIndex"

# Each task writes what it sees, then waits (at most 60 s) until all four have written theirs:
# the "together" marker proves the four ran at the same time. They then wait for the test's "go"
# (at most 120 s), so the test reads the job, the VC and the CLI while the four still run.
JOB = """protocolVersion: 2
name: halves
type: job
prerequisites:
  - {{name: image, type: dockerimage, uri: python:3.11-slim}}
taskRoles:
  infer:
    instances: 4
    dockerImage: image
    resourcePerInstance: {{cpu: 1, memoryMB: 128, gpu: 1}}
    commands: {commands}
extras:
  gpuShare:
    taskRoles:
      infer: {{gpuMilli: 500, gpuMemoryMiB: 2048}}
"""
COUNT = 'ls {m} | grep -c "^seen-[0-9]*$"'
COMMANDS = [
    "echo $CUDA_VISIBLE_DEVICES $PAI_GPU_SHARE_MILLI $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE $PAI_GPU_MEMORY_MIB"
    " > {m}/seen-$PAI_TASK_INDEX.tmp",
    "mv {m}/seen-$PAI_TASK_INDEX.tmp {m}/seen-$PAI_TASK_INDEX",
    f'i=0; while [ "$({COUNT})" -lt 4 ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done',
    f"{COUNT} > {{m}}/together-$PAI_TASK_INDEX",
    "i=0; while [ ! -e {m}/go ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done",
]


async def test_four_half_gpu_tasks_run_at_once_two_per_gpu_each_seeing_its_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    # The tasks run as the caller, so they can write into the test's own folder.
    monkeypatch.setenv("PAI_TASK_USER", "none")
    up = UpProcess(tmp_path / "data", "--gpus", "2").start()
    try:
        await up.wait_until_up()
        api_url = f"http://127.0.0.1:{up.port}"
        async with httpx.AsyncClient(base_url=api_url, timeout=30) as api:
            login = await api.post(
                "/api/v2/authn/basic/login", json={"username": "admin", "password": "up-admin-pass"}
            )
            api.headers["Authorization"] = f"Bearer {login.json()['token']}"
            commands = json.dumps([c.format(m=markers) for c in COMMANDS])
            job = JOB.format(commands=commands)
            submitted = await api.post("/api/v2/jobs", content=job, headers={"Content-Type": "text/yaml"})
            assert submitted.status_code == 202, submitted.text

            async def detail() -> dict[str, Any]:
                return dict((await api.get("/api/v2/jobs/admin~halves")).json())

            async def count_together() -> int:
                return len(list(markers.glob("together-*")))

            await eventually(count_together, lambda n: n == 4, within=120)

            def all_running(d: dict[str, Any]) -> bool:
                tasks = d.get("taskRoles", {}).get("infer", {}).get("taskStatuses", [])
                return len(tasks) == 4 and all(t["taskState"] == "RUNNING" for t in tasks)

            # The tasks run; the job's detail says so once REST has read their events.
            running = await eventually(detail, all_running, within=60)
            shared = running["sharedGpus"]
            assert [(g["gpu"], g["gpuMilli"], len(g["tasks"])) for g in shared] == [
                ("0", 1000, 2),
                ("1", 1000, 2),
            ]
            # Simulated GPUs: no device holds a share, and the detail says so.
            assert running["gpuShareEnforced"] is False
            assert running["gpuShareEnforcement"].startswith("the GPUs are simulated (pai up --gpus 2:")
            tasks = running["taskRoles"]["infer"]["taskStatuses"]
            assert {t["containerGpuMilli"] for t in tasks} == {500}
            vc = (await api.get("/api/v2/virtual-clusters/default")).json()
            assert vc["resourcesUsed"]["GPUs"] == 2
            per_device = {(g["gpu"], g["usedMilli"], len(g["tasks"])) for g in vc["sharedGpus"]}
            assert per_device == {(0, 1000, 2), (1, 1000, 2)}
            assert all(
                t["gpuMilli"] == 500 and t["user"] == "admin" for g in vc["sharedGpus"] for t in g["tasks"]
            )

            monkeypatch.setenv("PAI_CONFIG_DIR", str(tmp_path / "config"))
            monkeypatch.setenv("COLUMNS", "200")
            runner = CliRunner()
            logged = await asyncio.to_thread(
                runner.invoke,
                app,
                ["login", "--server", api_url, "--user", "admin"],
                env={"PAI_PASSWORD": "up-admin-pass"},
            )
            assert logged.exit_code == 0, logged.output
            status = await asyncio.to_thread(
                runner.invoke, app, ["job", "status", "halves", "--server", api_url]
            )
            assert status.exit_code == 0, status.output
            assert status.output.count("(500/1000)") == 4, status.output
            assert status.output.count("this job holds 1000/1000") == 2, status.output
            assert "gpu shares advisory, not enforced: the GPUs are simulated" in status.output
            shown = await asyncio.to_thread(
                runner.invoke, app, ["vc", "show", "default", "--server", api_url]
            )
            assert shown.exit_code == 0, shown.output
            assert "shared GPUs: 2" in shown.output, shown.output
            assert shown.output.count("(admin): 500") == 4, shown.output
            (markers / "go").write_text("")

            final = await eventually(
                detail, lambda d: d.get("jobStatus", {}).get("state") in ("SUCCEEDED", "FAILED"), within=120
            )
            if final["jobStatus"]["state"] != "SUCCEEDED":
                logs = [
                    (await api.get(f"{LOG}/{i}/attempts/0/logs/all")).json().get("content", "")[-1500:]
                    for i in range(4)
                ]
                raise AssertionError(f"{final}\n{logs}")

        seen = {i: (markers / f"seen-{i}").read_text().split() for i in range(4)}
        together = {i: (markers / f"together-{i}").read_text().strip() for i in range(4)}
        assert together == dict.fromkeys(range(4), "4")  # every task saw all four running
        devices = sorted(s[0] for s in seen.values())
        assert devices == ["0", "0", "1", "1"], seen  # one index each, two tasks per GPU
        assert all(s[1:] == ["500", "50", "2048"] for s in seen.values()), seen
        assert "GPU shares: advisory, not enforced (the GPUs are simulated" in up.text()

    finally:
        up.cleanup()
