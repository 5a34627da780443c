"""The `pai` command line: one typer application that gathers every sub-command.

Each command's module is imported only when that command runs (pai/cli/loading.py): `pai up`
imports the services, `pai deploy` the Kubernetes client, and a command that talks to the API
imports neither. The help a group lists for each command is written here; a test holds it equal
to the command's own.
"""

from __future__ import annotations

import typer

from pai.cli.loading import Deferred, DeferredGroup
from pai.cli.startup import lighten

lighten()

JOB_COMMANDS = (
    Deferred(
        "validate",
        "pai.cli.validating:validate",
        "Check job YAML files against the OpenPAI job protocol v2; exit 1 if any is invalid.",
    ),
    Deferred(
        "submit",
        "pai.cli.watching:submit",
        "Submit a job; prints USER~NAME and the job id (with --wait, then its progress).",
    ),
    Deferred("list", "pai.cli.jobs:list_jobs", "List jobs, newest first."),
    Deferred("status", "pai.cli.jobs:status", "Show a job's state and its tasks."),
    Deferred(
        "logs",
        "pai.cli.jobs:logs",
        "Print a task's log (its latest attempt); -f follows it, as `tail -f`, until the task ends.",
    ),
    Deferred(
        "exec",
        "pai.cli.executing:exec_command",
        "Run a command in a running task, as the task runs (`pai job exec JOB -it -- bash`).",
    ),
    Deferred(
        "stop",
        "pai.cli.jobs:stop",
        "Ask the platform to stop a job; a job that has already finished is left as it is.",
    ),
    Deferred(
        "clone",
        "pai.cli.jobs:clone",
        "Print a job's YAML to run it again (or submit it), its images pinned with --pin-images.",
    ),
    Deferred(
        "watch",
        "pai.cli.watching:watch",
        "Follow a job live until it ends; exit 0 SUCCEEDED, 1 FAILED, 2 STOPPED.",
    ),
)

job_group = DeferredGroup(
    name="job", help="Submit, inspect, validate and stop jobs.", no_args_is_help=True, deferred=JOB_COMMANDS
)


class PaiGroup(DeferredGroup):
    """`pai` itself: its commands in the order its help lists them."""

    entries = (
        Deferred(
            "sim",
            "pai.cli.scheduling:sim",
            "Replay a trace in virtual time through the HiveD core (or the quota baseline) and report\n"
            "queueing delay per VC and job size, allocation and fragmentation.",
        ),
        Deferred(
            "up", "pai.cli.up:up", "Start NATS and every service; keep them running (restarted if they exit)."
        ),
        Deferred(
            "login",
            "pai.cli.jobs:login",
            "Log in and keep the token for later commands (password from PAI_PASSWORD or a prompt).",
        ),
        Deferred(
            "events",
            "pai.cli.watching:events",
            "Tail the platform's live events (what you may see), until interrupted.",
        ),
        Deferred("version", "pai.cli.main:version", "Print the platform's version."),
        Deferred("job", "pai.cli.main:job_group", job_group.help or ""),
        Deferred(
            "scheduler", "pai.cli.scheduling:scheduler_app", "Scheduler tools: replay HiveD behaviour cases."
        ),
        Deferred("vc", "pai.cli.vcs:vc_app", "Virtual clusters: status and run-time configuration."),
        Deferred(
            "usage",
            "pai.cli.usage:usage",
            "GPU-hours, CPU-hours, jobs by final state and mean wait per user or VC (yours, unless admin).",
        ),
        Deferred(
            "failure-rules",
            "pai.cli.failure_rules:failure_rules_app",
            "Check and try out failure-analysis rules.",
        ),
        Deferred(
            "alert-rules",
            "pai.cli.alerting:alert_rules_app",
            "Check and change the alerting rules and routes.",
        ),
        Deferred("market", "pai.cli.market:market_app", "Share and reuse job templates and data sets."),
        Deferred(
            "deploy",
            "pai.cli.deploying:deploy_app",
            "Render, apply, inspect and upgrade the platform on Kubernetes.",
        ),
        Deferred("user", "pai.cli.accounts:user_app", "Users: create, list, change, remove (admins)."),
        Deferred("group", "pai.cli.accounts:group_app", "Groups and the rights they grant (admins)."),
        Deferred("token", "pai.cli.accounts:token_app", "Your tokens: list, create for scripts, revoke."),
        Deferred(
            "storage",
            "pai.cli.storages:storage_app",
            "Storages: list, add a local one, grant or revoke it to a group (admins).",
        ),
    )


app = typer.Typer(
    cls=PaiGroup, no_args_is_help=True, add_completion=False, help="An open platform for AI jobs on GPUs."
)


@app.callback()
def _pai() -> None:
    # A callback makes typer build `pai` as a group although every command is deferred.
    pass


def version() -> None:
    """Print the platform's version."""
    from importlib.metadata import version as dist_version

    typer.echo(dist_version("pai-platform"))


def main() -> None:
    app()
