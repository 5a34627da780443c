"""`python -m runtime`'s arguments, read without argparse: the same answers argparse gave."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from runtime import exitcodes
from runtime.__main__ import main, spec_path
from runtime.processes import runtime_command
from services.orchestrator.adapters.local import runtime_path
from tests.runtime.helpers import REPO_ROOT


def test_help_is_printed_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "usage: python -m runtime [-h] --spec SPEC" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--spec", "a.json"], Path("a.json")),
        (["--spec=b.json"], Path("b.json")),
        ([], "the following arguments are required: --spec"),
        (["--spec"], "unrecognized arguments: --spec"),
        (["--spec="], "argument --spec: expected one argument"),
        (["--spec", "a.json", "extra"], "unrecognized arguments: --spec a.json extra"),
    ],
)
def test_the_spec_path_or_what_is_wrong(argv: list[str], expected: Path | str) -> None:
    assert spec_path(argv) == expected


def test_bad_arguments_exit_2_with_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m runtime")
    assert "error: the following arguments are required: --spec" in err


def test_a_missing_spec_file_is_spec_invalid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--spec", str(tmp_path / "absent.json")]) == exitcodes.SPEC_INVALID
    assert "cannot read the task spec" in capsys.readouterr().err


def test_started_as_the_executor_starts_it_the_runtime_imports_no_heavy_library(tmp_path: Path) -> None:
    probe = (
        "import runpy, sys; sys.argv = ['runtime', '--help']\n"
        "try:\n    runpy.run_module('runtime', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('pydantic', 'yaml', 'psutil', 'argparse', 'typing', 'dataclasses')"
        " if m in sys.modules))"
    )
    argv = [*runtime_command(tmp_path / "spec.json")[:2], "-c", probe]
    out = subprocess.run(
        argv, cwd=REPO_ROOT, env={"PYTHONPATH": runtime_path()}, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip().splitlines()[-1] == "[]"
