"""What typer would load on every `pai` call is left until a call needs it (pai/cli/startup.py):
the quick converters take each value as typer's own would (and leave the rest to it), the help
reads the same, and neither pydantic nor rich's Markdown and traceback are imported on the way.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer import _click as click
from typer._coercion import build_runtime_param
from typer.core import TyperCommand, _TyperParameter

from pai.cli.loading import DeferredGroup
from pai.cli.main import app
from pai.cli.startup import QuickParam, quick_converter

REPO = Path(__file__).resolve().parents[2]
PAI = "from pai.cli.main import main; main()"
# Imported for a markup mode the commands do not use, or for an unexpected error's traceback.
HELP_ONLY = (
    "pydantic",
    "pydantic_core",
    "markdown_it",
    "pygments",
    "attr",
    "rich.markdown",
    "rich.traceback",
)

# Values a parameter of each type may be given: from the command line (strings), as the
# parameter's default, from an environment variable; good and bad ones.
SAMPLES: dict[str, list[Any]] = {
    "str": ["", "abc", "ünï", " spaced ", "-", "1", b"bytes", 5, None],
    "bool": [True, False, "true", "0", "", "maybe", 1, None],
    "int": [
        "0",
        "1",
        "-3",
        "50",
        "007",
        "+4",
        "1.0",
        "1.5",
        "1e3",
        " 5",
        "1_000",
        "abc",
        "",
        "9" * 30,
        0,
        5,
        2.0,
        True,
        None,
    ],
    "float": ["1.5", "-0.25", "1", "0", "007.5", "abc", "inf", "nan", "1e-3", "", "1.", 3, 2.5, True, None],
    "path": [
        "examples/hello.yaml",
        "examples",
        "nothing/here.yaml",
        "-",
        "",
        ".",
        "a\0b",
        str(REPO),
        REPO / "examples",
        None,
    ],
    "list": [(), ("a", "b"), ["x"], ("a", 1), "ab", None],
}


def kind(param: _TyperParameter) -> str:
    annotation = param.type_descriptor.annotation
    if param.type_descriptor.is_list:
        return "list"
    if isinstance(annotation, type) and issubclass(annotation, Path):
        return "path"
    return str(getattr(annotation, "__name__", annotation))


def all_parameters() -> list[tuple[str, _TyperParameter]]:
    """Every parameter of every `pai` command, by its command's path."""
    found = []

    def walk(command: click.Command, path: str) -> None:
        if isinstance(command, DeferredGroup):
            command.load_all()
        for param in command.params:
            if isinstance(param, _TyperParameter):
                found.append((f"{path} {param.name}", param))
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "pai")
    return found


def outcome(convert: Any, value: Any, param: _TyperParameter, ctx: click.Context) -> tuple[str, Any]:
    """What converting ``value`` gives: the value and its type, or the error and its message."""
    try:
        result = convert(value, param=param, ctx=ctx)
    except Exception as exc:  # the error itself is compared
        message = exc.format_message() if isinstance(exc, click.ClickException) else str(exc)
        return "error", (type(exc).__name__, message)
    return "value", (repr(result), type(result).__name__)


def test_every_parameter_of_the_commands_gets_a_quick_converter() -> None:
    slow = [path for path, param in all_parameters() if quick_converter(param.type_descriptor) is None]

    assert slow == []


def test_each_quick_converter_gives_what_typers_own_gives_for_good_and_bad_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(REPO)
    compared = 0
    for path, param in all_parameters():
        quick = quick_converter(param.type_descriptor)
        assert quick is not None, path
        ctx = click.Context(TyperCommand("pai"))
        for value in SAMPLES[kind(param)]:
            param._runtime_param = None
            typers = outcome(build_runtime_param(param.type_descriptor).coerce, value, param, ctx)
            quick_param = QuickParam(
                parameter_info=param.type_descriptor.parameter_info,
                annotation=param.type_descriptor.annotation,
                descriptor=param.type_descriptor,
                quick=quick,
            )
            assert outcome(quick_param.coerce, value, param, ctx) == typers, (path, value)
            compared += 1
    assert compared > 1000


def test_a_parameter_converts_through_the_quick_converter_once_the_command_line_is_imported() -> None:
    _, limit = next((path, param) for path, param in all_parameters() if path == "pai job list limit")
    limit._runtime_param = None

    assert isinstance(limit.get_runtime_param(), QuickParam)


def imported(code: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, list[str], str]:
    """The exit code, the modules imported in order, and the output of `python -c CODE ARGS`."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", done.stderr, flags=re.MULTILINE)
    assert names, done.stderr[-2000:]
    return done.returncode, names, done.stdout + done.stderr


def help_only(names: list[str]) -> list[str]:
    return [name for name in names if name in HELP_ONLY or name.split(".")[0] in HELP_ONLY]


@pytest.mark.parametrize(
    "args",
    [("--help",), ("job", "--help"), ("job", "list", "--help"), ("token", "list", "--help"), ("jbo",)],
    ids=" ".join,
)
def test_help_and_a_usage_error_load_no_pydantic_markdown_or_traceback(args: tuple[str, ...]) -> None:
    code, names, _ = imported(PAI, *args)

    assert code in (0, 2)
    assert "typer.rich_utils" in names
    assert help_only(names) == []


def test_a_command_reads_its_options_without_pydantic(tmp_path: Path) -> None:
    # Not logged in: the command stops after its options were read, before any request.
    env = {"PAI_CONFIG_DIR": str(tmp_path), "PAI_SERVER": "http://127.0.0.1:9"}
    code, names, output = imported(PAI, "job", "list", "--limit", "5", "--user", "alice", env=env)

    assert code == 1, output
    assert "not logged in" in output
    assert "pai.cli.following" in names  # pai.cli.jobs is imported by importlib, which importtime omits
    assert help_only(names) == []


@pytest.mark.parametrize(
    "args",
    [("--help",), ("job", "--help"), ("job", "list", "--help"), ("job", "list", "--limit", "0"), ("jbo",)],
    ids=" ".join,
)
def test_the_help_and_the_errors_read_as_with_typers_own_imports(args: tuple[str, ...]) -> None:
    """The same text and styles, whether rich's Markdown and traceback were imported first (as
    typer imports them) or left to their stand-ins."""
    env = {**os.environ, "FORCE_COLOR": "1", "COLUMNS": "100"}
    first = "import rich.markdown, rich.traceback, pydantic, typer._adapters; "
    outputs = [
        subprocess.run(
            [sys.executable, "-c", before + PAI, *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=env,
        )
        for before in (first, "")
    ]

    typers, ours = ((done.returncode, done.stdout, done.stderr) for done in outputs)
    assert ours == typers
    assert "Usage:" in ours[1] + ours[2]


def test_an_unexpected_error_still_shows_richs_traceback() -> None:
    code = (
        "import sys, typer, pai.cli.main\n"
        "broken = typer.Typer()\n"
        "@broken.command()\n"
        "def boom() -> None:\n    raise RuntimeError('boom')\n"
        "broken()\n"
    )
    exit_code, names, output = imported(code, env={"COLUMNS": "100"})

    assert exit_code == 1
    assert "rich.syntax" in names  # rich.traceback itself is imported by importlib, which importtime omits
    assert "Traceback (most recent call last)" in output
    assert "RuntimeError: boom" in output


def test_the_markdown_markup_mode_still_renders_markdown() -> None:
    code = (
        "import typer, pai.cli.main\n"
        "marked = typer.Typer(rich_markup_mode='markdown')\n"
        "@marked.command()\n"
        "def hello() -> None:\n    '''Say **hello** to the `world`.'''\n"
        "marked()\n"
    )
    exit_code, names, output = imported(code, "--help", env={"COLUMNS": "100"})

    assert exit_code == 0, output
    assert "markdown_it" in names
    assert "Say hello to the world." in output
