"""`pai job watch`: one line per change, retries with their reason, the outcome as exit code."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from libs.backbone.connecting import Bus
from libs.protocol.events import (
    FailureInfo,
    JobCompleted,
    JobRetrying,
    JobState,
    JobStopRequested,
    TaskCompleted,
    TaskStarted,
)
from pai.cli.client import Login, save_login
from pai.cli.main import app
from pai.cli.streaming import follow
from tests.events.lifecycles import LIFECYCLE, life, submitted
from tests.events.support import REPO, publish_all


@pytest.fixture
def logged_in(gateway_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("PAI_CONFIG_DIR", str(tmp_path / "cli"))
    save_login(Login(server=gateway_url, user="alice", token="alice-token"))
    return {"PAI_CONFIG_DIR": str(tmp_path / "cli")}


def oom(code: int) -> FailureInfo:
    return FailureInfo(
        code=code, phrase="ContainerOOMKilled", type="transient", reason="the task ran out of memory"
    )


async def test_watching_a_job_that_retries_then_fails_prints_the_reason_and_exits_1(
    topology: Bus, gateway_url: str, logged_in: dict[str, str]
) -> None:
    await publish_all(
        topology.js,
        [
            submitted("j1", "alice", "flaky"),
            TaskStarted(job_id="j1", attempt=0, role="main", index=0, node="n1"),
            TaskCompleted(job_id="j1", attempt=0, role="main", index=0, exit_code=137, failure=oom(137)),
            JobRetrying(
                job_id="j1", attempt=0, next_attempt=1, kind="platform", counted=False, failure=oom(137)
            ),
            TaskStarted(job_id="j1", attempt=1, role="main", index=0, node="n1"),
            TaskCompleted(job_id="j1", attempt=1, role="main", index=0, exit_code=1),
            JobCompleted(job_id="j1", attempt=1, state=JobState.FAILED, exit_code=1),
        ],
    )
    result = await asyncio.to_thread(
        CliRunner().invoke, app, ["job", "watch", "flaky", "--server", gateway_url], env=logged_in
    )
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [
        "submitted alice~flaky to virtual cluster default",
        "task main[0] started on n1 (attempt 0)",
        "task main[0] exited with code 137: the task ran out of memory",
        "attempt 0 failed: the task ran out of memory; retrying as attempt 1 (platform failure, not counted)",
        "task main[0] started on n1 (attempt 1)",
        "task main[0] exited with code 1",
        "job FAILED (exit code 1)",
    ]


async def test_watching_a_stopped_job_exits_2_and_others_jobs_are_not_found(
    topology: Bus, gateway_url: str, logged_in: dict[str, str]
) -> None:
    await publish_all(
        topology.js,
        [
            submitted("j2", "alice", "long"),
            JobStopRequested(job_id="j2", by="alice"),
            JobCompleted(job_id="j2", attempt=0, state=JobState.STOPPED, exit_code=-210),
        ],
    )
    result = await asyncio.to_thread(
        CliRunner().invoke, app, ["job", "watch", "alice~long", "--server", gateway_url], env=logged_in
    )
    assert result.exit_code == 2, result.output
    assert "stop requested by alice" in result.output

    def first_json_line() -> dict[str, object]:
        events = follow(gateway_url, "alice-token", {"job": "alice~long"}, since="0")
        received = next(events)
        events.close()
        return {"id": received.id, "type": received.type}

    assert await asyncio.to_thread(first_json_line) == {"id": "1", "type": "job.submitted"}


async def test_pai_events_refuses_an_unknown_type_with_the_servers_message(
    gateway_url: str, logged_in: dict[str, str]
) -> None:
    result = await asyncio.to_thread(
        CliRunner().invoke, app, ["events", "--type", "job.nope", "--server", gateway_url], env=logged_in
    )
    assert result.exit_code == 1
    assert "job.nope" in result.output


async def test_pai_events_json_tails_one_object_per_line(
    topology: Bus, gateway_url: str, logged_in: dict[str, str]
) -> None:
    await publish_all(topology.js, life("j3", "alice", "tail"))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from pai.cli.main import main; main()",
        *("events", "--job", "tail", "--since", "0", "--json", "--server", gateway_url),
        env={**os.environ, **logged_in, "PYTHONPATH": str(REPO)},
        stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    try:
        lines = [json.loads(await asyncio.wait_for(process.stdout.readline(), 30)) for _ in range(5)]
    finally:
        process.kill()
        await process.wait()
    assert [line["type"] for line in lines] == LIFECYCLE
    assert [line["id"] for line in lines] == ["1", "2", "3", "4", "5"]
    assert lines[-1]["event"]["state"] == "SUCCEEDED"
