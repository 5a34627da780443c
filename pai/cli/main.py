"""The `pai` command line: one typer application that gathers every sub-command."""

from __future__ import annotations

import typer

from pai.cli import accounts, jobs, validating, watching
from pai.cli.alerting import alert_rules_app
from pai.cli.deploying import deploy_app
from pai.cli.failure_rules import failure_rules_app
from pai.cli.market import market_app
from pai.cli.scheduling import register as register_scheduling
from pai.cli.up import up
from pai.cli.vcs import vc_app

app = typer.Typer(no_args_is_help=True, add_completion=False, help="An open platform for AI jobs on GPUs.")
job_app = typer.Typer(no_args_is_help=True, help="Submit, inspect, validate and stop jobs.")
app.add_typer(job_app, name="job")
register_scheduling(app)
app.add_typer(vc_app, name="vc")
app.add_typer(failure_rules_app, name="failure-rules")
app.add_typer(alert_rules_app, name="alert-rules")
app.add_typer(market_app, name="market")
job_app.command("validate")(validating.validate)
app.command(name="up")(up)
app.add_typer(deploy_app, name="deploy")
jobs.register(app, job_app)
watching.register(app, job_app)
accounts.register(app)


@app.command()
def version() -> None:
    """Print the platform's version."""
    from importlib.metadata import version as dist_version

    typer.echo(dist_version("pai-platform"))


def main() -> None:
    app()
