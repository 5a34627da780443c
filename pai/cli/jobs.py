"""`pai login` and the `pai job` commands that talk to the REST API: submit, list, status, logs, stop.

Every failure ends in one readable line on stderr and exit code 1 (2 for a refused job with
its problems listed): the server not reachable, a missing login, a 400 with the job's
problems, a 404. No stack trace reaches a user.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import typer
from rich.table import Table

from libs.protocol.job_details import JobDetail
from pai.cli.client import (
    Login,
    PaiClient,
    resolve_server,
    save_login,
)
from pai.cli.common import ServerOption, _client, _console, _error_console, _friendly_errors, _split_job
from pai.cli.following import FINAL_STATES, LogFollower, LogTarget

LOG_FILES = ("all", "stdout", "stderr")


def login(
    user: str = typer.Option("admin", "--user", "-u", envvar="PAI_USER", help="user name"),
    server: str | None = ServerOption,
) -> None:
    """Log in and keep the token for later commands (password from PAI_PASSWORD or a prompt).

    Without PAI_PASSWORD the password is asked for on a terminal, and read from the first line
    of standard input otherwise (`pai login < file`, or piped from a secret store).
    """
    server = resolve_server(server)
    password = os.environ.get("PAI_PASSWORD") or _password_from_input()
    with _friendly_errors(), PaiClient(server) as client:
        answer = client.login(user, password)
    path = save_login(Login(server=server, user=str(answer["user"]), token=str(answer["token"])))
    role = "admin" if answer.get("admin") else "user"
    _console().print(
        f"logged in to {server} as {answer['user']} ({role}); token saved in {path}", markup=False
    )


def _password_from_input() -> str:
    """The password typed unseen on a terminal; piped, the first line read as it is, since a
    hidden prompt cannot hide what is not typed and would only warn that it may be echoed."""
    if sys.stdin.isatty():
        return str(typer.prompt("Password", hide_input=True))
    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        _error_console().print(
            "error: no password: standard input is not a terminal and its first line is empty. "
            "Pipe the password in, or set PAI_PASSWORD.",
            markup=False,
        )
        raise typer.Exit(1)
    return password


def _ms(value: Any) -> str:
    if not value:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(int(value) / 1000))


def list_jobs(
    user: str = typer.Option("", "--user", help="only this user's jobs (comma-separated)"),
    state: str = typer.Option("", "--state", help="only jobs in these states (comma-separated)"),
    vc: str = typer.Option("", "--vc", help="only jobs of these virtual clusters"),
    keyword: str = typer.Option("", "--keyword", help="text in the user, job or virtual cluster name"),
    limit: int = typer.Option(50, "--limit", min=1, help="at most this many jobs"),
    server: str | None = ServerOption,
) -> None:
    """List jobs, newest first."""
    client, _ = _client(server)
    with _friendly_errors(), client:
        jobs = client.list_jobs(username=user, state=state, vc=vc, keyword=keyword, limit=limit)
    table = Table("JOB", "STATE", "VC", "GPUS", "RETRIES", "SUBMITTED")
    for job in jobs:
        table.add_row(
            f"{job['username']}~{job['name']}",
            job["state"],
            job["virtualCluster"],
            str(job["totalGpuNumber"]),
            str(job["retries"]),
            _ms(job.get("submissionTime")),
        )
    _console().print(table)


# How many tasks' executor notes `pai job status` prints (they differ only in the directory).
_NOTES_SHOWN = 3
# How much of a task's exit diagnostics `pai job status` prints (the job detail has it whole).
_CAUSE_CHARS = 400


def status(
    job: str = typer.Argument(..., help="USER~JOB, or JOB for the logged-in user"),
    server: str | None = ServerOption,
) -> None:
    """Show a job's state and its tasks."""
    client, login_ = _client(server, need_login=False)
    user, name = _split_job(job, login_)
    with _friendly_errors(), client:
        detail = client.job(user, name)
    st = detail["jobStatus"]
    out = _console()
    out.print(f"job        {user}~{name} (id {st.get('appId')})", markup=False)
    out.print(f"state      {st['state']} ({st['subState']})", markup=False)
    out.print(
        f"vc         {st['virtualCluster']}   gpus {st['totalGpuNumber']}   tasks {st['totalTaskNumber']}"
    )
    retries = st.get("retryDetails") or {}
    out.print(
        f"retries    {st['retries']} (user {retries.get('user', 0)}, platform {retries.get('platform', 0)}, "
        f"resource {retries.get('resource', 0)})   attempt {st['attemptId']}",
        markup=False,
    )
    if detail.get("gpuNote"):
        out.print(f"gpus       {detail['gpuNote']}", markup=False)
    if "gpuShareEnforced" in detail:
        held = "enforced" if detail["gpuShareEnforced"] else "advisory, not enforced"
        out.print(f"gpu shares {held}: {detail.get('gpuShareEnforcement', '')}", markup=False, soft_wrap=True)
    if st.get("pendingReason"):
        out.print(f"waiting    {st['pendingReason']}", markup=False)
    if st.get("queue"):
        queue = st["queue"]
        out.print(
            f"queue: {queue['position']} of {queue['of']} in VC {queue['virtualCluster']}", markup=False
        )
    if st.get("appExitCode") is not None:
        spec = st.get("appExitSpec") or {}
        out.print(f"exit       {st['appExitCode']} {spec.get('phrase', '')}", markup=False)
        if st.get("appExitDiagnostics"):
            out.print(f"diagnosis  {st['appExitDiagnostics']}", markup=False)
    table = Table("TASK", "STATE", "NODE", "IP", "GPUS", "EXIT", "RETRIES")
    notes: list[str] = []
    causes: list[str] = []
    parts = JobDetail.read(detail)
    for role, statuses in parts.roles.items():
        for task in statuses:
            if task.get("executorNote"):
                notes.append(f"{role}[{task['taskIndex']}]: {task['executorNote']}")
            if task.get("containerExitCode") not in (None, 0) and task.get("containerExitDiagnostics"):
                cause = " ".join(str(task["containerExitDiagnostics"]).split())
                causes.append(f"{role}[{task['taskIndex']}]: {cause[:_CAUSE_CHARS]}")
            exit_code = task.get("containerExitCode")
            table.add_row(
                f"{role}[{task['taskIndex']}]",
                task["taskState"],
                task.get("containerNodeName") or "-",
                task.get("containerIp") or "-",
                _gpus_of(task),
                "-" if exit_code is None else str(exit_code),
                str(task.get("retries", 0)),
            )
    out.print(table)
    for line in causes[:_NOTES_SHOWN]:
        out.print(f"cause      {line}", markup=False, soft_wrap=True)
    if len(causes) > _NOTES_SHOWN:
        out.print(f"cause      ... and {len(causes) - _NOTES_SHOWN} more tasks", markup=False)
    for gpu in parts.shared_gpus:
        held = ", ".join(f"{t['taskRole']}[{t['taskIndex']}] {t['gpuMilli']}" for t in gpu["tasks"])
        out.print(
            f"shared GPU {gpu['node']}/{gpu['gpu']}: this job holds {gpu['gpuMilli']}/1000 ({held})",
            markup=False,
        )
    for line in notes[:_NOTES_SHOWN]:
        out.print(f"note       {line}", markup=False, soft_wrap=True)
    if len(notes) > _NOTES_SHOWN:
        out.print(f"note       ... and {len(notes) - _NOTES_SHOWN} more tasks alike", markup=False)


def logs(
    job: str = typer.Argument(..., help="USER~JOB, or JOB for the logged-in user"),
    role: str | None = typer.Option(None, "--role", help="task role (default: the first)"),
    index: int = typer.Option(0, "--index", min=0, help="task index in the role"),
    file: str = typer.Option("all", "--file", help="all, stdout or stderr"),
    follow: bool = typer.Option(
        False, "--follow", "-f", help="keep printing what is added until the task ends"
    ),
    interval: float = typer.Option(
        1.0, "--interval", min=0.1, help="seconds between polls with -f while nothing is new"
    ),
    server: str | None = ServerOption,
) -> None:
    """Print a task's log (its latest attempt); -f follows it, as `tail -f`, until the task ends."""
    if file not in LOG_FILES:
        _error_console().print(f"error: --file {file!r} is not one of: {', '.join(LOG_FILES)}.", markup=False)
        raise typer.Exit(1)
    client, login_ = _client(server)
    user, name = _split_job(job, login_)
    err = _error_console()
    follower = LogFollower(
        client,
        LogTarget(user=user, name=name, role=role, index=index, file=file),
        write=lambda text: typer.echo(text, nl=False),
        note=lambda text: err.print(text, markup=False),
    )
    with _friendly_errors(), client:
        follower.run(follow=follow, interval=interval)


def stop(
    job: str = typer.Argument(..., help="USER~JOB, or JOB for the logged-in user"),
    server: str | None = ServerOption,
) -> None:
    """Ask the platform to stop a job; a job that has already finished is left as it is."""
    client, login_ = _client(server)
    user, name = _split_job(job, login_)
    with _friendly_errors(), client:
        state = client.job(user, name)["jobStatus"]["state"]
        if state in FINAL_STATES:
            _console().print(
                f"{user}~{name} has already finished ({state}); there is nothing to stop.", markup=False
            )
            return
        client.stop(user, name)
    _console().print(f"stop requested for {user}~{name}", markup=False)


def clone(
    job: str = typer.Argument(..., help="USER~JOB, or JOB for the logged-in user"),
    name: str | None = typer.Option(None, "--name", help="the clone's name (default: JOB-clone)"),
    pin_images: bool = typer.Option(
        False, "--pin-images", help="run the images by the digests the job's tasks ran (imageDigest)"
    ),
    submit_it: bool = typer.Option(False, "--submit", help="submit the clone instead of printing it"),
    server: str | None = ServerOption,
) -> None:
    """Print a job's YAML to run it again (or submit it), its images pinned with --pin-images."""
    import yaml  # only here: the other commands need no YAML

    from libs.protocol.pinning import PinningError, digests_by_role
    from libs.protocol.pinning import pin_images as pin_images_of

    client, login_ = _client(server)
    user, original = _split_job(job, login_)
    with _friendly_errors(), client:
        config = yaml.safe_load(client.job_config(user, original)) or {}
        if pin_images:
            try:
                config = pin_images_of(config, digests_by_role(client.job(user, original)))
            except PinningError as exc:
                _console().print(f"error: --pin-images: {exc}", markup=False)
                raise typer.Exit(1) from None
        config["name"] = name or f"{original}-clone"
        text = yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
        if not submit_it:
            typer.echo(text, nl=False)
            return
        submitted = client.submit(text)
    # The clone is the logged-in user's job, named as the server stored it (as `job submit` prints).
    _console().print(
        f"submitted {submitted['username']}~{submitted['name']} (id {submitted['jobId']})", markup=False
    )


def _gpus_of(task: dict[str, Any]) -> str:
    """A task's devices, and its share of the one device when it shares it (500/1000)."""
    gpus = task.get("containerGpus")
    if not gpus:
        return "-"
    milli = task.get("containerGpuMilli")
    return f"{gpus} ({milli}/1000)" if milli else str(gpus)
