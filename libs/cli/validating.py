"""`pai job validate`: check job YAML files locally, before submitting, as the server would.

Prints, per file, OK or every problem with its YAML path and a fix; `--json` prints one JSON
object per line for scripts and CI. A file that cannot be read is a problem of that file, so one
bad path never hides the verdicts of the others.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from libs.protocol import JobProtocolError, Problem, parse_job


def check_file(path: str) -> list[Problem]:
    """Every problem of one job file; an empty list means the job is valid."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        return [
            Problem(
                path="",
                message=f"cannot read the file: {reason}",
                hint="check the file name and its permissions",
            )
        ]
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return [
            Problem(
                path="",
                message=f"the file is not UTF-8 text ({exc.reason} at byte {exc.start})",
                hint="save the job as UTF-8",
            )
        ]
    try:
        parse_job(text)
    except JobProtocolError as exc:
        return exc.problems
    return []


def validate(
    files: list[str] = typer.Argument(..., help="Job YAML files to check."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per file."),
) -> None:
    """Check job YAML files against the OpenPAI job protocol v2; exit 1 if any is invalid."""
    all_valid = True
    for name in files:
        problems = check_file(name)
        all_valid = all_valid and not problems
        if as_json:
            record = {"file": name, "valid": not problems, "problems": [p.model_dump() for p in problems]}
            typer.echo(json.dumps(record, ensure_ascii=False))
        elif not problems:
            typer.echo(f"{name}: OK")
        else:
            typer.echo(f"{name}: {len(problems)} problem{'s' if len(problems) > 1 else ''}")
            for problem in problems:
                typer.echo(f"  {problem.path or '(document)'}: {problem.message}")
                if problem.hint:
                    typer.echo(f"      fix: {problem.hint}")
    raise typer.Exit(0 if all_valid else 1)
