"""`pai job watch`, `pai job submit --wait` and `pai events`: live events in the terminal.

`watch` replays the job's history from its submission (``since=0``) and then follows it live,
one line per state change, task start and exit, and retry with its reason, until the job ends;
the exit code is the job's outcome (0 SUCCEEDED, 1 FAILED, 2 STOPPED). `pai events` tails the
stream with the same filters as ``GET /api/v2/events``, as lines or as JSON (``--json``).
Each line is written and flushed as its event arrives, so a reader at the other end of a pipe
(`pai events | grep ...`, a script) has it at once, never when a block of output fills.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from pai.cli.client import ApiError
from pai.cli.common import ServerOption, _client, _console, _friendly_errors, _split_job, read_job_file
from pai.cli.streaming import EXIT_CODES, describe, follow


def line_out(text: str) -> None:
    """One line on stdout, flushed: a pipe's reader has it now (stdout into a pipe is
    block-buffered, so an unflushed line would wait for 8 KiB more or for the command's end)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _watch(server: str | None, user: str, name: str) -> int:
    client, login = _client(server)
    client.close()
    with _friendly_errors():
        for received in follow(
            client.server, login.token if login else None, {"job": f"{user}~{name}"}, since="0"
        ):
            line_out(describe(received.type, received.event))
            if received.type == "job.completed":
                return EXIT_CODES.get(str(received.event.get("state")), 1)
    return 1


def watch(
    job: str = typer.Argument(..., help="USER~JOB, or JOB for the logged-in user"),
    server: str | None = ServerOption,
) -> None:
    """Follow a job live until it ends; exit 0 SUCCEEDED, 1 FAILED, 2 STOPPED."""
    client, login = _client(server)
    user, name = _split_job(job, login)
    with _friendly_errors(), client:
        try:
            client.job(user, name)  # a job that does not exist would never send an event
        except ApiError as exc:
            if exc.code == "NoJobError":
                raise
    raise typer.Exit(_watch(server, user, name))


def submit(
    file: Path = typer.Argument(
        ..., exists=True, dir_okay=False, readable=True, help="job YAML (protocol v2)"
    ),
    wait: bool = typer.Option(False, "--wait", help="follow the job until it ends (exit as `pai job watch`)"),
    server: str | None = ServerOption,
) -> None:
    """Submit a job; prints USER~NAME and the job id (with --wait, then its progress)."""
    text = read_job_file(file)
    client, _ = _client(server)
    with _friendly_errors(), client:
        answer = client.submit(text)
    _console().print(f"submitted {answer['username']}~{answer['name']} (id {answer['jobId']})", markup=False)
    for warning in answer.get("warnings") or []:
        _console().print(f"warning: {warning['path']}: {warning['message']}", markup=False)
    if wait:
        raise typer.Exit(_watch(server, str(answer["username"]), str(answer["name"])))


def events(
    job: str | None = typer.Option(None, "--job", help="USER~JOB, or JOB for the logged-in user"),
    types: list[str] = typer.Option([], "--type", help="an event type from the catalog (repeatable)"),
    since: str | None = typer.Option(None, "--since", help="resume after this event id (0: from the start)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object per line: id, type, event"),
    server: str | None = ServerOption,
) -> None:
    """Tail the platform's live events (what you may see), until interrupted."""
    client, login = _client(server)
    client.close()
    params: dict[str, str] = {}
    if job:
        user, name = _split_job(job, login)
        params["job"] = f"{user}~{name}"
    if types:
        params["types"] = ",".join(types)
    with _friendly_errors():
        try:
            for received in follow(client.server, login.token if login else None, params, since=since):
                if as_json:
                    line = {"id": received.id, "type": received.type, "event": received.event}
                    line_out(json.dumps(line, separators=(",", ":")))
                else:
                    line_out(f"{received.id}  {received.type}  {describe(received.type, received.event)}")
        except KeyboardInterrupt:
            raise typer.Exit(0) from None
