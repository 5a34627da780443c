"""Failure rules changed at run time through the REST API (and the CLI), with the platform running.

The end-to-end test runs the REST service and the orchestrator in-process on a real
nats-server, with real task processes; the test itself places jobs, as the scheduler would.
A job that exits 3 printing "DATASET GONE" is an unknown failure, retried within its budget;
once an admin PUTs a rule for that line, the next such job fails at once with the rule's
phrase, and nothing was restarted in between.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from libs.backbone.connecting import Bus
from libs.backbone.natsserver import EmbeddedNats
from libs.failures import default_rules, default_rules_text
from libs.protocol.events import JobState
from pai.cli.main import app
from services.orchestrator.app import OrchestratorSettings, main
from tests.failures.test_runtime_rules import DATASET_RULE, rules_with
from tests.orchestrator.service_support import schedule, watch_jobs
from tests.rest.conftest import ADMIN_PASSWORD
from tests.rest.serving import ServerThread
from tests.rest.test_list_and_auth import add_user
from tests.support.events import JobEvents
from tests.support.jobs import job_model
from tests.support.waiting import eventually

Client = TestClient[Any, Any]
YAML = {"Content-Type": "text/yaml"}
RULES = "/api/v2/failure-rules"
ONE_WORKER = job_model({"taskRoles": {"worker": {"instances": 1}}})
BROKEN_RULES = """\
spec:
- code: 3
  phrase: BadPattern
  pattern:
    runtimeContainerPatterns:
    - userLogRegex: '(unclosed'
- phrase: NoCode
  type: USER_FAILURE
- code: 4
  phrase: Fine
  type: USER_FAILURE
  behavior: SOMETIMES
"""


def dataset_job(name: str) -> str:
    return f"""protocolVersion: 2
name: {name}
type: job
jobRetryCount: 1
prerequisites:
  - name: image
    type: dockerimage
    uri: python:3.11
taskRoles:
  worker:
    instances: 1
    dockerImage: image
    resourcePerInstance: {{cpu: 1, memoryMB: 64, gpu: 0, ports: {{http: 1}}}}
    commands:
      - echo loading data
      - echo DATASET GONE
      - exit 3
"""


async def test_every_logged_in_user_reads_the_defaults_until_rules_are_set(
    api: Client, admin_headers: dict[str, str]
) -> None:
    assert (await api.get(RULES)).status == 401
    eve = await add_user(api, "eve", "eve-password")
    for prefix in ("/api", "/rest-server/api"):
        response = await api.get(f"{prefix}/v2/failure-rules", headers=eve)
        assert response.status == 200
        assert response.content_type == "text/yaml"
        assert await response.text() == default_rules_text()
        assert response.headers["X-Failure-Rules-Version"] == "0"
        assert response.headers["X-Failure-Rules-Source"] == "default"


async def test_an_admin_sets_reads_back_and_resets_the_rules(
    api: Client, admin_headers: dict[str, str]
) -> None:
    text = rules_with(DATASET_RULE)
    response = await api.put(RULES, data=text, headers={**admin_headers, **YAML})
    assert response.status == 200, await response.text()
    body = await response.json()
    assert body["rules"] == len(default_rules().rules) + 1
    assert body["version"] > 0
    read = await api.get("/rest-server/api/v2/failure-rules", headers=admin_headers)
    assert await read.text() == text
    assert read.headers["X-Failure-Rules-Version"] == str(body["version"])
    reset = await api.delete(RULES, headers=admin_headers)
    assert reset.status == 200
    assert (await reset.json())["rules"] == len(default_rules().rules)
    again = await api.get(RULES, headers=admin_headers)
    assert (await again.text(), again.headers["X-Failure-Rules-Source"]) == (default_rules_text(), "default")


async def test_a_bad_rule_file_is_refused_with_every_problem(
    api: Client, admin_headers: dict[str, str]
) -> None:
    response = await api.put(RULES, data=BROKEN_RULES, headers={**admin_headers, **YAML})
    assert response.status == 400
    body = await response.json()
    assert body["code"] == "InvalidParametersError"
    where = [(p["index"], p["code"], p["field"]) for p in body["problems"]]
    assert where == [
        (0, 3, "pattern.runtimeContainerPatterns[0].userLogRegex"),
        (1, None, "code"),
        (2, 4, "behavior"),
    ]
    assert all(p["message"] for p in body["problems"])
    assert any(p["hint"] for p in body["problems"])
    # Nothing was stored: the defaults are still in force.
    read = await api.get(RULES, headers=admin_headers)
    assert read.headers["X-Failure-Rules-Source"] == "default"
    empty = await api.put(RULES, data="", headers={**admin_headers, **YAML})
    assert (empty.status, (await empty.json())["code"]) == (400, "InvalidParametersError")


async def test_only_an_admin_changes_the_rules(api: Client, admin_headers: dict[str, str]) -> None:
    eve = await add_user(api, "eve", "eve-password")
    put = await api.put(RULES, data=rules_with(DATASET_RULE), headers={**eve, **YAML})
    assert (put.status, (await put.json())["code"]) == (403, "ForbiddenUserError")
    delete = await api.delete(RULES, headers=eve)
    assert delete.status == 403
    assert (await api.get(RULES, headers=eve)).headers["X-Failure-Rules-Source"] == "default"


@pytest.fixture
async def orchestrator(nats_server: EmbeddedNats, tmp_path: Path) -> AsyncIterator[OrchestratorSettings]:
    settings = OrchestratorSettings(
        nats_url=nats_server.url, data_dir=tmp_path / "orchestrator", stop_grace_seconds=2.0
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    service = asyncio.create_task(main(settings, stop, ready=ready))
    await asyncio.wait_for(ready.wait(), 30)
    try:
        yield settings
    finally:
        stop.set()
        await asyncio.wait_for(service, 30)


async def _submit(api: Client, headers: dict[str, str], name: str) -> str:
    response = await api.post("/api/v2/jobs", data=dataset_job(name), headers={**headers, **YAML})
    assert response.status == 202, await response.text()
    job_id: str = (await response.json())["jobId"]
    return job_id


async def _attempts(api: Client, headers: dict[str, str], name: str) -> list[dict[str, Any]]:
    response = await api.get(f"/api/v2/jobs/admin~{name}/job-attempts", headers=headers)
    attempts: list[dict[str, Any]] = await response.json() if response.status == 200 else []
    return attempts


async def test_a_rule_added_while_the_platform_runs_changes_the_outcome_of_the_next_failure(
    api: Client, admin_headers: dict[str, str], bus: Bus, orchestrator: OrchestratorSettings
) -> None:
    events: JobEvents = await watch_jobs(bus)
    # Before: an unknown failure, retried within the job's budget.
    first = await _submit(api, admin_headers, "before")
    await schedule(bus, first, ONE_WORKER, 0)
    retry = (await events.wait_for("job.retrying", first))[0]
    assert (retry.kind, retry.counted, retry.exit_code) == ("user", True, 3)
    assert retry.failure is not None
    assert (retry.failure.phrase, retry.failure.type) == ("UnrecognisedFailure", "unknown")
    assert (retry.trigger_role, retry.trigger_index) == ("worker", 0)
    started = (await events.wait_for("task.started", first))[0]
    assert started.address == "127.0.0.1"
    assert len(started.ports["http"]) == 1
    await schedule(bus, first, ONE_WORKER, 1)
    await events.wait_for("job.completed", first)

    # The attempt history shows how the retried attempt ended; the task shows its ports.
    history = await eventually(lambda: _attempts(api, admin_headers, "before"), lambda found: len(found) == 2)
    earlier = next(a for a in history if a["attemptIndex"] == 0)
    assert (earlier["exitCode"], earlier["exitPhrase"]) == (3, "UnrecognisedFailure")
    assert earlier["appExitSpec"]["code"] == 255
    assert (earlier["appExitTriggerTaskRoleName"], earlier["appExitTriggerTaskIndex"]) == ("worker", 0)
    detail = await (await api.get("/api/v2/jobs/admin~before", headers=admin_headers)).json()
    task = detail["taskRoles"]["worker"]["taskStatuses"][0]
    assert task["containerPorts"]["http"] == started.ports["http"][0]
    assert task["containerIp"] == "127.0.0.1"

    # An admin adds a rule for that log line; nothing restarts.
    put = await api.put(RULES, data=rules_with(DATASET_RULE), headers={**admin_headers, **YAML})
    assert put.status == 200, await put.text()

    second = await _submit(api, admin_headers, "after")
    await schedule(bus, second, ONE_WORKER, 0)
    done = (await events.wait_for("job.completed", second))[0]
    assert (done.state, done.attempt, done.exit_code) == (JobState.FAILED, 0, 3)
    assert done.failure is not None
    assert (done.failure.phrase, done.failure.type, done.failure.code) == ("DatasetGone", "permanent", 3)
    assert done.failure.matched_line == "DATASET GONE"
    assert not events.of("job.retrying", second)


def test_the_cli_gets_sets_and_resets_the_rules(
    server: ServerThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    runner = CliRunner()
    monkeypatch.setenv("PAI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("PAI_SERVER", server.url)

    def pai(*args: str) -> tuple[int, str]:
        result = runner.invoke(app, list(args), env={"PAI_PASSWORD": ADMIN_PASSWORD})
        return result.exit_code, result.output

    assert pai("login", "--user", "admin")[0] == 0
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(rules_with(DATASET_RULE))
    bad.write_text(BROKEN_RULES)

    code, output = pai("failure-rules", "set", str(bad))
    assert code == 2
    assert "rule #0 (code 3), field 'pattern.runtimeContainerPatterns[0].userLogRegex'" in output
    assert "rule #1, field 'code'" in output
    assert "rule #2 (code 4), field 'behavior'" in output

    code, output = pai("failure-rules", "set", str(good))
    assert code == 0, output
    assert f"OK: {len(default_rules().rules) + 1} rules in force, version" in output
    code, output = pai("failure-rules", "get", "--output", str(tmp_path / "now.yaml"))
    assert code == 0, output
    assert (tmp_path / "now.yaml").read_text() == good.read_text()

    code, output = pai("failure-rules", "reset")
    assert (code, "packaged defaults" in output) == (0, True)
    code, output = pai("failure-rules", "get")
    assert code == 0
    assert output.rstrip("\n") == default_rules_text().rstrip("\n")
