"""`pai up` on a node with NVIDIA GPUs (a fake nvidia-smi) and NVIDIA MPS (a fake control daemon).

The platform starts one MPS control daemon, a task holding half a GPU is its client (the pipe
directory and its limits), a task of a whole GPU is not, the job's detail and `pai job status`
say that shares are enforced, and Ctrl-C asks the daemon to quit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from pai.cli.main import app
from tests.e2e.up_process import UpProcess
from tests.support.fake_nvidia import fake_mps_control, fake_nvidia_smi
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(240)

JOB = """protocolVersion: 2
name: mixed
type: job
prerequisites:
  - {{name: image, type: dockerimage, uri: python:3.11-slim}}
taskRoles:
  shared:
    instances: 1
    dockerImage: image
    resourcePerInstance: {{cpu: 1, memoryMB: 128, gpu: 1}}
    commands: {shared}
  whole:
    instances: 1
    dockerImage: image
    resourcePerInstance: {{cpu: 1, memoryMB: 128, gpu: 1}}
    commands: {whole}
extras:
  gpuShare:
    taskRoles:
      shared: {{gpuMilli: 500, gpuMemoryMiB: 2048}}
"""
SEEN = (
    'echo "pipe=[$CUDA_MPS_PIPE_DIRECTORY] threads=[$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE]'
    ' memory=[$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT]" > {m}/$PAI_CURRENT_TASK_ROLE_NAME.tmp'
    " && mv {m}/$PAI_CURRENT_TASK_ROLE_NAME.tmp {m}/$PAI_CURRENT_TASK_ROLE_NAME"  # whole once seen
)
WAIT = "i=0; while [ ! -e {m}/{other} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done"
TASK_LOG = "/attempts/0/taskRoles/{role}/taskIndex/0/attempts/0/logs/all"


async def test_a_node_with_gpus_runs_mps_for_shared_tasks_and_says_shares_are_enforced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    bin_dir = tmp_path / "bin"
    fake = fake_mps_control(bin_dir)
    fake_nvidia_smi(bin_dir, 2)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PAI_TASK_USER", "none")  # the tasks write into the test's own folder
    data = tmp_path / "data"
    pipe = data / "mps" / "pipe"
    up = UpProcess(data).start()
    try:
        await up.wait_until_up()
        assert (
            f"GPU shares: enforced (NVIDIA MPS: a control daemon for this node's 2 GPU(s), pipe {pipe})"
            in (up.text())
        )
        [started] = fake.starts()
        assert started.split()[1:3] == [str(pipe), str(data / "mps" / "log")]
        api_url = f"http://127.0.0.1:{up.port}"
        async with httpx.AsyncClient(base_url=api_url, timeout=30) as api:
            login = await api.post(
                "/api/v2/authn/basic/login", json={"username": "admin", "password": "up-admin-pass"}
            )
            api.headers["Authorization"] = f"Bearer {login.json()['token']}"
            # A job whose one role has succeeded is over (its other tasks are stopped): each task
            # waits (at most 60 s) until the other one has written what it saw.
            shared = json.dumps([SEEN.format(m=markers), WAIT.format(m=markers, other="whole")])
            whole = json.dumps([SEEN.format(m=markers), WAIT.format(m=markers, other="shared")])
            job = JOB.format(shared=shared, whole=whole)
            submitted = await api.post("/api/v2/jobs", content=job, headers={"Content-Type": "text/yaml"})
            assert submitted.status_code == 202, submitted.text

            async def detail() -> dict[str, Any]:
                return dict((await api.get("/api/v2/jobs/admin~mixed")).json())

            final = await eventually(
                detail, lambda d: d.get("jobStatus", {}).get("state") in ("SUCCEEDED", "FAILED"), within=120
            )
            logs = {
                role: (await api.get(f"/api/v2/jobs/admin~mixed{TASK_LOG.format(role=role)}")).json()
                for role in ("shared", "whole")
            }
            assert final["jobStatus"]["state"] == "SUCCEEDED", (final, logs)
            assert final["gpuShareEnforced"] is True
            assert "NVIDIA MPS" in final["gpuShareEnforcement"]

        seen = {role: markers / role for role in ("shared", "whole")}
        assert all(path.exists() for path in seen.values()), json.dumps(logs)

        assert (markers / "shared").read_text().strip() == f"pipe=[{pipe}] threads=[50] memory=[0=2048M]"
        assert (markers / "whole").read_text().strip() == "pipe=[] threads=[] memory=[]"

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
        status = await asyncio.to_thread(runner.invoke, app, ["job", "status", "mixed", "--server", api_url])
        assert status.exit_code == 0, status.output
        assert "gpu shares enforced: NVIDIA MPS" in status.output, status.output

        up.signal(signal.SIGINT)
        process = up.process
        assert process is not None
        await eventually(lambda: asyncio.to_thread(process.poll), lambda code: code is not None, within=30)
        assert fake.quits() == [f"quit {pipe}"], up.text()
        assert len(fake.starts()) == 1
    finally:
        up.cleanup()
        for line in fake.starts():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split()[-1]), signal.SIGKILL)
