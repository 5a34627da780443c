"""`pai usage` on `pai up --gpus 2`: the GPU-hours per user are those of the jobs they ran.

Two users each run a short job on simulated GPUs (alice one GPU, the admin two); once both have
SUCCEEDED, `pai usage --since 1d --by user --json` reports for each the job's GPUs times the time
its attempt ran, as the job's own detail reports that time.
"""

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

pytestmark = pytest.mark.timeout(300)

JOB = """protocolVersion: 2
name: {name}
type: job
prerequisites:
  - {{name: image, type: dockerimage, uri: python:3.11-slim}}
taskRoles:
  train:
    dockerImage: image
    resourcePerInstance: {{cpu: 1, memoryMB: 128, gpu: {gpus}}}
    commands:
      - sleep 2
"""
HOUR_MS = 3_600_000


async def run_job(api: httpx.AsyncClient, user: str, name: str, gpus: int) -> dict[str, Any]:
    submitted = await api.post(
        "/api/v2/jobs", content=JOB.format(name=name, gpus=gpus), headers={"Content-Type": "text/yaml"}
    )
    assert submitted.status_code == 202, submitted.text

    async def detail() -> dict[str, Any]:
        return dict((await api.get(f"/api/v2/jobs/{user}~{name}")).json())

    final = await eventually(
        detail,
        lambda d: d.get("jobStatus", {}).get("state") in ("SUCCEEDED", "FAILED", "STOPPED"),
        within=120,
    )
    assert final["jobStatus"]["state"] == "SUCCEEDED", final
    return final


async def signed_in(api_url: str, user: str, password: str) -> httpx.AsyncClient:
    client = httpx.AsyncClient(base_url=api_url, timeout=30)
    login = await client.post("/api/v2/authn/basic/login", json={"username": user, "password": password})
    assert login.status_code == 200, login.text
    client.headers["Authorization"] = f"Bearer {login.json()['token']}"
    return client


async def test_pai_usage_lists_each_users_gpu_hours_from_the_jobs_they_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    up = UpProcess(tmp_path / "data", "--gpus", "2").start()
    try:
        await up.wait_until_up()
        api_url = f"http://127.0.0.1:{up.port}"
        admin = await signed_in(api_url, "admin", "up-admin-pass")
        created = await admin.post(
            "/api/v2/users",
            json={"username": "alice", "password": "alice-password", "virtualCluster": ["default"]},
        )
        assert created.status_code == 201, created.text
        alice = await signed_in(api_url, "alice", "alice-password")
        try:
            jobs = await asyncio.gather(
                run_job(alice, "alice", "one-gpu", 1), run_job(admin, "admin", "two-gpus", 2)
            )
        finally:
            await alice.aclose()
            await admin.aclose()
        expected = {
            job["jobStatus"]["username"]: gpus
            * (job["jobStatus"]["appCompletedTime"] - job["jobStatus"]["appLaunchedTime"])
            / HOUR_MS
            for job, gpus in zip(jobs, (1, 2), strict=True)
        }

        monkeypatch.setenv("PAI_CONFIG_DIR", str(tmp_path / "config"))
        runner = CliRunner()
        logged = await asyncio.to_thread(
            runner.invoke,
            app,
            ["login", "--server", api_url, "--user", "admin"],
            env={"PAI_PASSWORD": "up-admin-pass"},
        )
        assert logged.exit_code == 0, logged.output
        shown = await asyncio.to_thread(
            runner.invoke, app, ["usage", "--since", "1d", "--by", "user", "--json", "--server", api_url]
        )
        assert shown.exit_code == 0, shown.output
        report = json.loads(shown.output)
        hours = {row["user"]: row["gpuHours"] for row in report["rows"]}
        assert hours == {user: pytest.approx(value, abs=1e-6) for user, value in expected.items()}
        assert all(value > 0 for value in hours.values())
        assert {row["user"]: row["jobs"]["SUCCEEDED"] for row in report["rows"]} == {"admin": 1, "alice": 1}
    finally:
        up.cleanup()
