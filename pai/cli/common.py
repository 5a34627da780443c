"""What every `pai` command shares: the --server option, a client logged in to it, the API's
errors printed as a user reads them (and the exit code they give), USER~JOB references, and job
files read and checked before anything is sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console

from pai.cli.client import (
    DEFAULT_SERVER,
    ApiError,
    ClientError,
    Login,
    PaiClient,
    resolve_server,
    saved_login,
)
from pai.cli.output import console

ServerOption = typer.Option(
    None,
    "--server",
    envvar="PAI_SERVER",
    help=f"the platform's REST address [default: the last one logged in to, else {DEFAULT_SERVER}]",
    show_default=False,
)


def _console() -> Console:
    return console()


def _error_console() -> Console:
    return console(stderr=True)


def api_error_lines(exc: ApiError, problems: Iterable[str] = ()) -> list[str]:
    """What a refused request prints: the error with its code, each problem (already worded by
    the command), then each piece of advice on a line of its own, so none runs into the error."""
    if exc.status == 401:
        lines = [f"error: {exc.message}"]
    else:
        lines = [f"error: {exc.message} [{exc.code}]"]
    lines.extend(f"  - {problem}" for problem in problems)
    if exc.hint:
        lines.append(f"hint: {exc.hint}")
    if exc.status == 401:
        lines.append("hint: Run `pai login` first.")
    return lines


@contextmanager
def _friendly_errors() -> Iterator[None]:
    try:
        yield
    except ApiError as exc:
        problems = []
        for problem in exc.problems:
            where = problem.get("path") or "(document)"
            fix = f" ({problem['hint']})" if problem.get("hint") else ""
            problems.append(f"{where}: {problem.get('message', '')}{fix}")
        err = _error_console()
        for line in api_error_lines(exc, problems):
            err.print(line, markup=False)
        raise typer.Exit(2 if exc.problems and exc.status != 401 else 1) from None
    except ClientError as exc:
        _error_console().print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None


def _client(server: str | None, *, need_login: bool = True) -> tuple[PaiClient, Login | None]:
    server = resolve_server(server)
    login = saved_login(server)
    if need_login and login is None:
        _error_console().print(
            f"error: not logged in to {server}; run `pai login --server {server}`.", markup=False
        )
        raise typer.Exit(1)
    return PaiClient(server, login.token if login else None), login


def _split_job(ref: str, login: Login | None) -> tuple[str, str]:
    user, sep, name = ref.partition("~")
    if sep:
        if not user or not name:
            _error_console().print(f"error: {ref!r} is not USER~JOB.", markup=False)
            raise typer.Exit(1)
        return user, name
    if login is None:
        _error_console().print(f"error: write the job as USER~{ref} or log in first.", markup=False)
        raise typer.Exit(1)
    return login.user, ref


def read_job_file(file: Path) -> str:
    """The text of a job file the CLI is about to send, checked first (encoding, size, emptiness);
    a problem is printed and ends the command, so nothing is sent."""
    from pai.cli.validating import JobFile  # the job protocol's models: only commands that send a job

    job_file = JobFile(str(file))
    if job_file.text is None:
        for problem in job_file.problems:
            _error_console().print(f"error: {file}: {problem.message} ({problem.hint})", markup=False)
        raise typer.Exit(1)
    for warning in job_file.warnings:
        _error_console().print(f"warning: {file}: {warning}", markup=False)
    text = job_file.text
    if not text.strip():
        _error_console().print(
            f"error: {file} is empty: there is no job to submit. Write one in the OpenPAI job "
            "protocol v2 (examples/hello.yaml is a start) and check it with `pai job validate`.",
            markup=False,
        )
        raise typer.Exit(2)
    return text
