"""`pai job validate`: check job YAML files locally, before submitting, as the server would.

Prints, per file, OK or every problem with its YAML path and a fix; `--json` prints one JSON
object per line for scripts and CI. A file that cannot be read is a problem of that file, so one
bad path never hides the verdicts of the others. A file larger than a server accepts by default
gets a warning; `pai job submit` reads files the same way (JobFile).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from libs.protocol import JobProtocolError, Problem, parse_job
from libs.protocol.advice import advise
from libs.protocol.limits import DEFAULT_BODY_BYTES


class JobFile:
    """A job file as read from disk: its text, or why it cannot be read, and size warnings."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.text: str | None = None
        self.problems: list[Problem] = []
        self.warnings: list[str] = []
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            reason = exc.strerror or str(exc)
            self.problems.append(
                Problem(
                    path="",
                    message=f"cannot read the file: {reason}",
                    hint="check the file name and its permissions",
                )
            )
            return
        if len(raw) > DEFAULT_BODY_BYTES:
            self.warnings.append(
                f"the file is {len(raw):,} bytes, more than the {DEFAULT_BODY_BYTES:,} bytes a server "
                "accepts by default (PAI_LIMIT_BODY_BYTES): submitting it is refused unless the admin "
                "raised the limit"
            )
        try:
            self.text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            self.problems.append(
                Problem(
                    path="",
                    message=f"the file is not UTF-8 text ({exc.reason} at byte {exc.start}, "
                    f"0x{raw[exc.start]:02x})",
                    hint="save the job as UTF-8, for example `iconv -f latin1 -t utf-8 FILE > NEW`",
                )
            )


def check(file: JobFile) -> list[Problem]:
    if file.text is None:
        return file.problems
    try:
        job = parse_job(file.text)
    except JobProtocolError as exc:
        return exc.problems
    file.warnings.extend(str(warning) for warning in advise(job))
    return []


def validate(
    files: list[str] = typer.Argument(..., help="Job YAML files to check."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per file."),
) -> None:
    """Check job YAML files against the OpenPAI job protocol v2; exit 1 if any is invalid."""
    all_valid = True
    for name in files:
        file = JobFile(name)
        problems = check(file)
        all_valid = all_valid and not problems
        if as_json:
            record = {
                "file": name,
                "valid": not problems,
                "problems": [p.model_dump() for p in problems],
                "warnings": file.warnings,
            }
            typer.echo(json.dumps(record, ensure_ascii=False))
            continue
        if not problems:
            typer.echo(f"{name}: OK")
        else:
            typer.echo(f"{name}: {len(problems)} problem{'s' if len(problems) > 1 else ''}")
            for problem in problems:
                typer.echo(f"  {problem.path or '(document)'}: {problem.message}")
                if problem.hint:
                    typer.echo(f"      fix: {problem.hint}")
        for warning in file.warnings:
            typer.echo(f"  warning: {warning}")
    raise typer.Exit(0 if all_valid else 1)
