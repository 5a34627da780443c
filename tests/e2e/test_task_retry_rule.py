"""OpenPAI's retry rule, said: taskRetryCount counts only with gang allocation off.

With the gang on (the default), a submission, a dry run and `pai job submit` warn that the
field is ignored, naming extras.gangAllocation; with it off, a failing task is retried once on
its own, and the job fails after the second try.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.platform import ADMIN_PASSWORD, Cli, running_platform

pytestmark = pytest.mark.timeout(240)


def _job(name: str, *, gang: bool) -> str:
    doc: dict[str, Any] = {
        "protocolVersion": 2,
        "name": name,
        "type": "job",
        "prerequisites": [{"name": "image", "type": "dockerimage", "uri": "python:3.11-slim"}],
        "taskRoles": {
            "main": {
                "instances": 1,
                "taskRetryCount": 1,
                "dockerImage": "image",
                "resourcePerInstance": {"cpu": 1, "memoryMB": 128, "gpu": 0},
                "commands": ["echo try; exit 3"],
            }
        },
    }
    if not gang:
        doc["extras"] = {"gangAllocation": False}
    return json.dumps(doc)


async def test_a_task_retry_count_under_the_gang_is_warned_and_without_it_a_task_is_retried_once(
    tmp_path: Path,
) -> None:
    async with running_platform(tmp_path / "data") as platform:
        headers = {"Content-Type": "text/yaml"}
        dry = await platform.api.post(
            "/api/v2/jobs?dryRun=true", content=_job("gang", gang=True), headers=headers
        )
        assert dry.status_code == 200, dry.text
        [warning] = dry.json()["warnings"]
        assert warning["path"] == "taskRoles.main.taskRetryCount"
        assert "extras.gangAllocation: false" in warning["message"]

        path = tmp_path / "gang.yaml"
        path.write_text(_job("gang", gang=True))
        cli = Cli(platform.info.api_url, tmp_path / "config")
        code, _, err = await cli.run("login", "--user", "admin", env={"PAI_PASSWORD": ADMIN_PASSWORD})
        assert code == 0, err
        code, out, err = await cli.run("job", "submit", str(path))
        assert code == 0, err
        assert "warning: taskRoles.main.taskRetryCount: " in out, out
        assert "extras.gangAllocation" in out, out

        answer = await platform.api.post("/api/v2/jobs", content=_job("alone", gang=False), headers=headers)
        assert answer.status_code == 202, answer.text
        assert answer.json()["warnings"] == []
        completed = await platform.completed(answer.json()["jobId"])
        assert completed.state == "FAILED"
        detail = await platform.detail("alone")
        [task] = detail["taskRoles"]["main"]["taskStatuses"]
        assert task["retries"] == 1, task  # the task's own second try, within its taskRetryCount
        assert detail["jobStatus"]["retries"] == 0, detail
