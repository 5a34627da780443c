"""`pai` imports only what the command run needs: no service, no SQLAlchemy, no Kubernetes client
for `pai --help` or for a command that talks to the API (bench/cli_bench.py measures the time).

Each case runs in a fresh interpreter under `-X importtime`, which writes one line per module
imported to stderr; the module names are read from there.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from pai.cli.loading import DeferredGroup, Placeholder, first_paragraph
from pai.cli.main import app

REPO = Path(__file__).resolve().parents[2]
# What `pai up` and `pai deploy` need, and no command that talks to the API does.
HEAVY = ("services", "sqlalchemy", "kubernetes")
# Commands that talk to the API, as `--help` resolves them: the command's module is imported
# and its parameters built, as when it runs.
API_COMMANDS = [
    ("job", "list"),
    ("job", "submit"),
    ("job", "status"),
    ("job", "logs"),
    ("job", "exec"),
    ("job", "stop"),
    ("job", "clone"),
    ("job", "watch"),
    ("login",),
    ("events",),
    ("vc", "list"),
    ("user", "list"),
    ("token", "list"),
    ("market", "list"),
    ("failure-rules", "get"),
    ("alert-rules", "show"),
    ("usage",),
]


PAI = "from pai.cli.main import main; main()"


def imported_modules(code: str, *args: str) -> list[str]:
    """The modules `python -c CODE ARGS...` imported, in order; CODE must exit 0."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", done.stderr, flags=re.MULTILINE)
    assert names, done.stderr[-2000:]
    return names


def heavy(names: list[str]) -> list[str]:
    return [name for name in names if name.split(".")[0] in HEAVY]


def test_importing_the_command_line_loads_no_service_sqlalchemy_or_kubernetes() -> None:
    names = imported_modules("import pai.cli.main")

    assert "pai.cli.main" in names
    assert heavy(names) == []


def test_pai_help_loads_no_command_module() -> None:
    names = imported_modules(PAI, "--help")

    assert heavy(names) == []
    assert [name for name in names if name.startswith("pai.cli.")] == [
        "pai.cli.loading",
        "pai.cli.startup",
        "pai.cli.main",
    ]


@pytest.mark.parametrize("command", API_COMMANDS, ids=" ".join)
def test_a_command_that_talks_to_the_api_loads_no_service_sqlalchemy_or_kubernetes(
    command: tuple[str, ...],
) -> None:
    names = imported_modules(PAI, *command, "--help")

    assert heavy(names) == []


def _groups() -> list[DeferredGroup]:
    root = typer.main.get_command(app)
    assert isinstance(root, DeferredGroup)
    job = root.load_all()["job"]
    assert isinstance(job, DeferredGroup)
    return [root, job]


def test_each_deferred_command_shows_in_its_group_the_help_it_has_once_loaded() -> None:
    for group in _groups():
        placeholders = {name: cmd for name, cmd in group.commands.items() if isinstance(cmd, Placeholder)}
        for name, loaded in group.load_all().items():
            assert loaded.name == name
            assert not isinstance(loaded, Placeholder)
            if name in placeholders:
                assert placeholders[name].help == first_paragraph(loaded.help), name


def test_pai_help_lists_every_command_and_a_typo_is_told_the_nearest_one() -> None:
    runner = CliRunner()
    listed = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert listed.exit_code == 0
    for name in ("sim", "up", "login", "events", "version", "job", "vc", "alert-rules", "deploy", "token"):
        assert re.search(rf"^│ {re.escape(name)} ", listed.output, flags=re.MULTILINE), name

    typo = runner.invoke(app, ["jbo"], env={"COLUMNS": "200"})
    assert typo.exit_code == 2
    assert "Did you mean 'job'?" in typo.output


def test_a_deferred_command_runs_once_resolved() -> None:
    result = CliRunner().invoke(app, ["job", "validate", str(REPO / "examples" / "hello.yaml")])

    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith("hello.yaml: OK")


def test_a_plain_api_call_loads_no_httpx() -> None:
    """httpx and httpcore cost a `pai` call more than the rest of it: plain requests go through
    the standard library; only the streams (`events`, `watch`) load httpx."""
    code = (
        "from pai.cli.client import PaiClient, ServerUnreachableError\n"
        "try:\n    PaiClient('http://127.0.0.1:9', 'token').list_jobs(username='alice')\n"
        "except ServerUnreachableError as exc:\n    print(exc)\n"
    )
    loaded = imported_modules(code)
    assert "pai.cli.client" in loaded
    assert "urllib.request" in loaded
    assert not [name for name in loaded if name.split(".")[0] in ("httpx", "httpcore")]
