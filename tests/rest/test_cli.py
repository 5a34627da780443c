"""The `pai` commands against a running REST service: login, submit, list, status, logs, stop."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from nats.aio.msg import Msg
from typer.testing import CliRunner

from libs.backbone.connecting import Bus, connect
from libs.backbone.topology import publish_event
from libs.protocol.events import JobCompleted, JobScheduled, JobState, TaskPlacement, TaskStarted
from pai.cli.main import app
from tests.rest.conftest import ADMIN_PASSWORD
from tests.rest.jobs import job_yaml
from tests.rest.serving import ServerThread

runner = CliRunner()


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: ServerThread) -> Path:
    config = tmp_path / "config"
    monkeypatch.setenv("PAI_CONFIG_DIR", str(config))
    monkeypatch.setenv("PAI_SERVER", server.url)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("PAI_PASSWORD", raising=False)
    return config


def pai(*args: str, password: str | None = None) -> tuple[int, str]:
    env = {"PAI_PASSWORD": password} if password else {}
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, result.output


def logged_in(config: Path) -> None:
    code, output = pai("login", "--user", "admin", password=ADMIN_PASSWORD)
    assert code == 0, output
    assert "logged in" in output
    saved = config / "credentials.json"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert (
        "token"
        in json.loads(saved.read_text())["servers"][next(iter(json.loads(saved.read_text())["servers"]))]
    )


def test_submit_list_status_and_stop_from_the_command_line(cli_env: Path, tmp_path: Path) -> None:
    logged_in(cli_env)
    job_file = tmp_path / "job.yaml"
    job_file.write_text(job_yaml("cli-job"))

    code, output = pai("job", "submit", str(job_file))
    assert code == 0, output
    assert output.startswith("submitted admin~cli-job (id ")

    code, output = pai("job", "submit", str(job_file))
    assert code == 1
    assert "already exists" in output
    assert "ConflictJobError" in output

    code, output = pai("job", "list")
    assert code == 0, output
    assert "admin~cli-job" in output
    assert "WAITING" in output

    code, output = pai("job", "status", "cli-job")
    assert code == 0, output
    assert "admin~cli-job" in output
    assert "WAITING" in output
    assert "worker[1]" in output

    code, output = pai("job", "stop", "admin~cli-job")
    assert (code, output.strip()) == (0, "stop requested for admin~cli-job")


def test_status_says_what_the_executor_did_with_the_image(
    cli_env: Path, tmp_path: Path, server: ServerThread
) -> None:
    logged_in(cli_env)
    job_file = tmp_path / "job.yaml"
    job_file.write_text(job_yaml("hosted", instances=1))
    code, output = pai("job", "submit", str(job_file))
    assert code == 0, output
    job_id = output.split("(id ")[1].rstrip(")\n")
    note = "the docker image busybox was not used: ... as user pai-task, in directory /d/work"

    async def orchestrate() -> None:
        bus = await connect(server.settings.nats_url, name="fake-orchestrator", initial_timeout=10)
        placement = (TaskPlacement(role="worker", index=0, node="n1", node_address="10.0.0.9"),)
        await publish_event(bus.js, JobScheduled(job_id=job_id, attempt=0, placements=placement))
        started = TaskStarted(job_id=job_id, attempt=0, role="worker", index=0, node="n1", note=note)
        await publish_event(bus.js, started)
        await bus.close()

    server.run(orchestrate())
    for _ in range(200):
        code, output = pai("job", "status", "admin~hosted")
        if "RUNNING" in output:
            break
    assert code == 0, output
    assert f"note       worker[0]: {note}" in output


def test_a_refused_job_lists_its_problems_with_paths(cli_env: Path, tmp_path: Path) -> None:
    logged_in(cli_env)
    job_file = tmp_path / "bad.yaml"
    job_file.write_text(job_yaml("bad").replace("instances: 2", "instances: -1"))
    code, output = pai("job", "submit", str(job_file))
    assert code == 2
    assert "InvalidProtocolError" in output
    assert "  - taskRoles.worker.instances:" in output
    assert "Traceback" not in output


def test_logs_follow_the_task_until_the_job_ends(cli_env: Path, tmp_path: Path, server: ServerThread) -> None:
    logged_in(cli_env)
    job_file = tmp_path / "job.yaml"
    job_file.write_text(job_yaml("logged", instances=1))
    code, output = pai("job", "submit", str(job_file))
    assert code == 0, output
    job_id = output.split("(id ")[1].rstrip(")\n")

    text = "line one\nline two\nline three\n"

    async def orchestrate() -> Bus:
        bus = await connect(server.settings.nats_url, name="fake-orchestrator", initial_timeout=10)

        async def answer(msg: Msg) -> None:
            query = json.loads(msg.data)
            # Small pieces, so following takes several requests.
            piece = text[query["offset"] : query["offset"] + 9]
            reply = {
                "content": piece,
                "offset": query["offset"],
                "nextOffset": query["offset"] + len(piece),
                "size": len(text),
            }
            await msg.respond(json.dumps(reply).encode())

        await bus.nc.subscribe("pai.rpc.orchestrator.logs", cb=answer)
        placement = (TaskPlacement(role="worker", index=0, node="n1", node_address="10.0.0.9"),)
        await publish_event(bus.js, JobScheduled(job_id=job_id, attempt=0, placements=placement))
        await publish_event(
            bus.js, JobCompleted(job_id=job_id, attempt=0, state=JobState.SUCCEEDED, exit_code=0)
        )
        return bus

    bus = server.run(orchestrate())
    try:
        for _ in range(200):
            code, output = pai("job", "status", "admin~logged")
            if "SUCCEEDED" in output:
                break
        assert "SUCCEEDED" in output
        code, output = pai(
            "job", "logs", "admin~logged", "--role", "worker", "--index", "0", "-f", "--interval", "0.1"
        )
        assert code == 0, output
        assert output == text
    finally:
        server.run(bus.close())


def test_clear_errors_without_a_server_or_a_login(cli_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, output = pai("job", "list")
    assert code == 1
    assert "not logged in" in output

    code, output = pai("login", "--user", "admin", password="wrong")
    assert code == 1
    assert "User name or password is incorrect" in output

    code, output = pai("job", "list", "--server", "http://127.0.0.1:9")
    assert code == 1
    assert "not logged in" in output

    url = os.environ["PAI_SERVER"]
    (cli_env / "credentials.json").parent.mkdir(parents=True, exist_ok=True)
    (cli_env / "credentials.json").write_text(
        json.dumps({"servers": {url: {"user": "admin", "token": "stale"}}})
    )
    code, output = pai("job", "list")
    assert code == 1
    assert "log in again" in output
    assert "Run `pai login` first" in output

    monkeypatch.setenv("PAI_SERVER", "http://127.0.0.1:9")
    code, output = pai("login", password="x")
    assert code == 1
    assert "cannot reach the platform at http://127.0.0.1:9" in output
    assert "Traceback" not in output


def test_commands_use_the_server_last_logged_in_to(
    cli_env: Path, tmp_path: Path, server: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As `pai up` suggests: `pai login --server URL`, then commands without --server.
    monkeypatch.delenv("PAI_SERVER")
    code, output = pai("job", "list")
    assert code == 1
    assert "not logged in to http://127.0.0.1:9186" in output  # nothing logged in: the default

    code, output = pai("login", "--server", server.url + "/", "--user", "admin", password=ADMIN_PASSWORD)
    assert code == 0, output
    job_file = tmp_path / "job.yaml"
    job_file.write_text(job_yaml("remembered"))
    code, output = pai("job", "submit", str(job_file))
    assert code == 0, output
    code, output = pai("job", "list")
    assert code == 0, output
    assert "admin~remembered" in output
    code, output = pai("failure-rules", "get")
    assert code == 0, output

    # A server named explicitly still wins over the remembered one.
    code, output = pai("job", "list", "--server", "http://127.0.0.1:9")
    assert code == 1
    assert "127.0.0.1:9" in output


def test_stopping_a_finished_job_says_so_and_requests_nothing(
    cli_env: Path, tmp_path: Path, server: ServerThread
) -> None:
    logged_in(cli_env)
    job_file = tmp_path / "job.yaml"
    job_file.write_text(job_yaml("done", instances=1))
    code, output = pai("job", "submit", str(job_file))
    assert code == 0, output
    job_id = output.split("(id ")[1].rstrip(")\n")
    stops: list[str] = []

    async def record(msg: Msg) -> None:
        stops.append(msg.subject)

    async def finish() -> Bus:
        bus = await connect(server.settings.nats_url, name="fake-orchestrator", initial_timeout=10)
        await bus.js.subscribe(f"pai.job.{job_id}.job.stop_requested", cb=record, ordered_consumer=True)
        await publish_event(
            bus.js, JobCompleted(job_id=job_id, attempt=0, state=JobState.SUCCEEDED, exit_code=0)
        )
        return bus

    bus = server.run(finish())
    try:
        for _ in range(200):
            code, output = pai("job", "status", "admin~done")
            if "SUCCEEDED" in output:
                break
        code, output = pai("job", "stop", "done")
        assert (code, output.strip()) == (
            0,
            "admin~done has already finished (SUCCEEDED); there is nothing to stop.",
        )
        server.run(bus.nc.flush())
        assert stops == [], "no stop was requested"
    finally:
        server.run(bus.close())


def test_an_empty_file_is_called_empty_before_anything_is_sent(cli_env: Path, tmp_path: Path) -> None:
    logged_in(cli_env)
    empty = tmp_path / "empty.yaml"
    empty.write_text("\n")
    code, output = pai("job", "submit", str(empty))
    assert code == 2
    assert f"error: {empty} is empty: there is no job to submit." in output
    assert "request body" not in output
    assert "HTTP" not in output


def test_job_list_does_not_wrap_names_when_the_output_is_not_a_terminal(
    cli_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    logged_in(cli_env)
    name = "a-job-name-long-enough-to-pass-eighty-columns-" + "x" * 30
    job_file = tmp_path / "job.yaml"
    job_file.write_text(job_yaml(name))
    code, output = pai("job", "submit", str(job_file))
    assert code == 0, output
    code, output = pai("job", "list")
    assert code == 0, output
    [row] = [line for line in output.splitlines() if name in line]
    assert f"admin~{name}" in row
    assert "WAITING" in row, "the row stays on one line"
