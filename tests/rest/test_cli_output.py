"""What the `pai` commands print against a running REST service: a clone's name (never the login
it was sent with), a refused request's error and its hint on lines of their own, and a password
piped to `pai login` read without a prompt's warning.

The service keeps job details private (the platform's default), so another user's job is refused
with both an error and a hint.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pai.cli.main import app
from services.rest.settings import RestSettings
from tests.rest.conftest import ADMIN_PASSWORD
from tests.rest.jobs import job_yaml
from tests.rest.serving import ServerThread

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture
def rest_settings(rest_settings: RestSettings) -> RestSettings:
    return rest_settings.model_copy(update={"job_detail_public": False})


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: ServerThread) -> Path:
    config = tmp_path / "config"
    monkeypatch.setenv("PAI_CONFIG_DIR", str(config))
    monkeypatch.setenv("PAI_SERVER", server.url)
    monkeypatch.setenv("COLUMNS", "200")
    for name in ("PAI_PASSWORD", "PAI_NEW_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    return config


def pai(*args: str, **env: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, result.output


def log_in_as(user: str, password: str) -> None:
    code, output = pai("login", "--user", user, PAI_PASSWORD=password)
    assert code == 0, output


def users(*names: str) -> None:
    """Each user created by the admin, with the password NAME-pass-1."""
    log_in_as("admin", ADMIN_PASSWORD)
    for name in names:
        code, output = pai("user", "create", name, PAI_NEW_PASSWORD=f"{name}-pass-1")
        assert code == 0, output


def saved_token(config: Path) -> str:
    servers = json.loads((config / "credentials.json").read_text())["servers"]
    return str(next(iter(servers.values()))["token"])


def test_a_submitted_clone_is_named_as_user_tilde_job_and_its_token_never_shows(
    cli_env: Path, tmp_path: Path
) -> None:
    users("alice")
    log_in_as("alice", "alice-pass-1")
    job_file = tmp_path / "train.yaml"
    job_file.write_text(job_yaml("alice-train"))
    code, output = pai("job", "submit", str(job_file))
    assert code == 0, output

    code, output = pai("job", "clone", "alice-train", "--name", "alice-train-2", "--submit")

    assert code == 0, output
    assert re.fullmatch(r"submitted alice~alice-train-2 \(id [0-9a-f]+\)\n", output), output
    token = saved_token(cli_env)
    assert token not in output
    assert "Login(" not in output
    code, listed = pai("job", "list")
    assert "alice~alice-train-2" in listed


def test_a_refused_stop_prints_the_error_then_the_hint_on_its_own_line(cli_env: Path, tmp_path: Path) -> None:
    users("alice", "bob")
    log_in_as("alice", "alice-pass-1")
    job_file = tmp_path / "train.yaml"
    job_file.write_text(job_yaml("alice-train"))
    assert pai("job", "submit", str(job_file))[0] == 0
    log_in_as("bob", "bob-pass-1")

    code, output = pai("job", "stop", "alice~alice-train")

    assert code == 1
    assert output.splitlines() == [
        "error: User bob is not allowed to read job alice~alice-train. [ForbiddenUserError]",
        "hint: On this cluster only a job's owner and admins read its details, attempts, events, "
        "config and logs (PAI_JOB_DETAIL_PUBLIC=false).",
    ]


def test_a_refused_login_token_says_what_the_server_advises_then_to_log_in(cli_env: Path) -> None:
    cli_env.mkdir(parents=True)
    (cli_env / "credentials.json").write_text(
        json.dumps({"servers": {os.environ["PAI_SERVER"]: {"user": "admin", "token": "stale"}}})
    )

    code, output = pai("job", "list")

    assert code == 1
    error, *hints = output.splitlines()
    assert error == "error: Your token is invalid."
    assert hints == [
        "hint: The token is expired, revoked or not from this cluster; log in again.",
        "hint: Run `pai login` first.",
    ]


def _login_piped(server: ServerThread, config: Path, stdin: str) -> subprocess.CompletedProcess[str]:
    """`pai login` in its own process, its password piped in; a new session, so it has no
    terminal to fall back on (getpass reads /dev/tty when there is one)."""
    env = {key: value for key, value in os.environ.items() if key != "PAI_PASSWORD"}
    env.update(PAI_CONFIG_DIR=str(config), PAI_SERVER=server.url)
    return subprocess.run(
        [sys.executable, "-c", "from pai.cli.main import main; main()", "login", "--user", "admin"],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
        start_new_session=True,
        check=False,
    )


def test_a_piped_password_logs_in_without_a_prompt_or_an_echo_warning(
    server: ServerThread, tmp_path: Path
) -> None:
    done = _login_piped(server, tmp_path / "config", f"{ADMIN_PASSWORD}\n")

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"logged in to {server.url} as admin (admin)")
    assert done.stderr == ""
    assert saved_token(tmp_path / "config")


def test_an_empty_piped_password_is_refused_before_anything_is_sent(
    server: ServerThread, tmp_path: Path
) -> None:
    done = _login_piped(server, tmp_path / "config", "")

    assert done.returncode == 1
    assert done.stderr.startswith("error: no password")
    assert "PAI_PASSWORD" in done.stderr
    assert not (tmp_path / "config" / "credentials.json").exists()
