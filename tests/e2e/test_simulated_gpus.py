"""`pai up --gpus 2` on a machine without GPUs: a `gpu: 1` job runs and says its GPU was simulated."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from pai.cli.main import app
from tests.e2e.up_process import UpProcess
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(240)

JOB = """protocolVersion: 2
name: one-gpu
type: job
prerequisites:
  - {name: image, type: dockerimage, uri: python:3.11-slim}
taskRoles:
  train:
    dockerImage: image
    resourcePerInstance: {cpu: 1, memoryMB: 128, gpu: 1}
    commands:
      - 'echo "CUDA=[$CUDA_VISIBLE_DEVICES] NVIDIA=[$NVIDIA_VISIBLE_DEVICES]"'
"""
LOG = "/api/v2/jobs/admin~one-gpu/attempts/0/taskRoles/train/taskIndex/0/attempts/0/logs/all"


async def test_a_gpu_job_runs_on_simulated_gpus_sees_one_index_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    up = UpProcess(tmp_path / "data", "--gpus", "2").start()
    try:
        await up.wait_until_up()
        assert "GPUs: 2 simulated" in up.text()
        if os.geteuid() == 0:
            # pai up says what holds for tasks: their users, their limits and by what, what not.
            assert (
                "task users: a uid per platform user, from 1800000000-1800999999; task limits: " in up.text()
            )
            assert "gpu devices (cgroup v1)" in up.text() or "cgroup v2" in up.text()
            assert "not enforced: disk (" in up.text()
        api_url = f"http://127.0.0.1:{up.port}"
        async with httpx.AsyncClient(base_url=api_url, timeout=30) as api:
            login = await api.post(
                "/api/v2/authn/basic/login", json={"username": "admin", "password": "up-admin-pass"}
            )
            api.headers["Authorization"] = f"Bearer {login.json()['token']}"
            submitted = await api.post("/api/v2/jobs", content=JOB, headers={"Content-Type": "text/yaml"})
            assert submitted.status_code == 202, submitted.text

            async def detail() -> dict[str, Any]:
                return dict((await api.get("/api/v2/jobs/admin~one-gpu")).json())

            final = await eventually(
                detail, lambda d: d.get("jobStatus", {}).get("state") in ("SUCCEEDED", "FAILED"), within=90
            )
            assert final["jobStatus"]["state"] == "SUCCEEDED", final
            assert final["simulatedGpus"] is True
            assert "simulated" in final["gpuNote"]
            log = (await api.get(LOG)).json()["content"]
        [line] = [line for line in log.splitlines() if line.startswith("CUDA=")]
        cuda = line.split("]")[0].removeprefix("CUDA=[")
        assert cuda in ("0", "1"), line  # one index of the two declared
        assert f"NVIDIA=[{cuda}]" in line

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
            runner.invoke, app, ["job", "status", "one-gpu", "--server", api_url]
        )
        assert status.exit_code == 0, status.output
        assert "GPUs of this job were simulated" in " ".join(status.output.split())
    finally:
        up.cleanup()
