"""`pai alert-rules`: check an alerting configuration, store it on the platform, show what it uses.

`check FILE` reads the file here and lists every problem with its YAML path; it needs no login
and sends nothing. `set FILE` checks it, then sends it to the platform the CLI is logged in to
(`PUT /api/v2/alert-rules`, an administrator's login), which checks it again and stores it where
the alerter watches, so the next evaluation uses it without a restart. `show` prints what the
platform uses now (`GET /api/v2/alert-rules`, an administrator's login too: receivers hold
addresses and webhook URLs), the built-in configuration while none is stored.

`set` and `show` reach the platform only through its REST API, at --server, PAI_SERVER or the
server of the last `pai login`; without a login they refuse. They never connect to a NATS
server: an address of the bus that defaulted to 127.0.0.1:4222 once wrote the rules to whatever
answered there, and said they were stored while the platform went on with its old ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from pai.cli.client import ApiError, ClientError
from pai.cli.common import ServerOption
from pai.cli.common import _client as logged_in_client

if TYPE_CHECKING:
    from libs.alerting import AlertConfig

alert_rules_app = typer.Typer(no_args_is_help=True, help="Check and change the alerting rules and routes.")

# The bus options of earlier versions, kept only to say what replaced them.
_RETIRED = "--nats-url, --nats-user, --nats-password and --nats-ca"
BusUrl = Annotated[str | None, typer.Option("--nats-url", hidden=True)]
BusUser = Annotated[str | None, typer.Option("--nats-user", hidden=True)]
BusPassword = Annotated[str | None, typer.Option("--nats-password", hidden=True)]
BusCa = Annotated[str | None, typer.Option("--nats-ca", hidden=True)]


def _refuse_bus_options(*given: str | None) -> None:
    if any(value is not None for value in given):
        typer.echo(
            f"error: {_RETIRED} are gone: `pai alert-rules` goes through the platform's REST API. "
            "Log in with `pai login --server URL --user ADMIN` and run the command without them.",
            err=True,
        )
        raise typer.Exit(2)


def _load(path: Path) -> tuple[str, AlertConfig]:
    from libs.alerting import ConfigError, load_config

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        typer.echo(f"error: cannot read the alerting file {str(path)!r}: {why}", err=True)
        raise typer.Exit(2) from None
    try:
        return text, load_config(text)
    except ConfigError as exc:
        for problem in exc.problems:
            typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(1) from None


def _summary(rules: Any, receivers: Any, inhibitions: Any) -> str:
    return f"{rules} rules, {receivers} receivers, {inhibitions} inhibit rules"


@contextmanager
def _remote_errors() -> Iterator[None]:
    """One readable line per problem on stderr, never a stack trace."""
    try:
        yield
    except ApiError as exc:
        typer.echo(f"error: {exc.message} [{exc.code}]", err=True)
        for problem in exc.problems:
            where = problem.get("path") if isinstance(problem, dict) else None
            message = problem.get("message", "") if isinstance(problem, dict) else str(problem)
            typer.echo(f"  - {where}: {message}" if where else f"  - {message}", err=True)
        # The platform's advice, where the client keeps it apart from OpenPAI's message.
        if hint := getattr(exc, "hint", None):
            typer.echo(f"hint: {hint}", err=True)
        if exc.status == 401:
            typer.echo("hint: Run `pai login` first.", err=True)
        raise typer.Exit(1) from None
    except ClientError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


@alert_rules_app.command()
def check(file: Annotated[Path, typer.Argument(help="An alerting configuration (YAML).")]) -> None:
    """Validate a file here and print its problems, or OK (no login needed; nothing is sent)."""
    _, config = _load(file)
    summary = _summary(len(config.rules), len(config.receivers), len(config.inhibit_rules))
    typer.echo(f"OK: {summary}")


@alert_rules_app.command("set")
def set_rules(
    file: Annotated[Path, typer.Argument(help="An alerting configuration (YAML).")],
    server: str | None = ServerOption,
    nats_url: BusUrl = None,
    nats_user: BusUser = None,
    nats_password: BusPassword = None,
    nats_ca: BusCa = None,
) -> None:
    """Validate a file and make it the platform's alerting configuration (admin login)."""
    _refuse_bus_options(nats_url, nats_user, nats_password, nats_ca)
    text, _ = _load(file)
    client, _login = logged_in_client(server)
    with _remote_errors(), client:
        answer = client.set_alert_rules(text)
    summary = _summary(answer.get("rules"), answer.get("receivers"), answer.get("inhibitRules"))
    typer.echo(f"stored: {summary} (revision {answer.get('version')}); applied at the next evaluation")


@alert_rules_app.command()
def show(
    server: str | None = ServerOption,
    nats_url: BusUrl = None,
    nats_user: BusUser = None,
    nats_password: BusPassword = None,
    nats_ca: BusCa = None,
) -> None:
    """Print the platform's alerting configuration (admin login); the built-in one while none is stored."""
    _refuse_bus_options(nats_url, nats_user, nats_password, nats_ca)
    client, _login = logged_in_client(server)
    with _remote_errors(), client:
        text, _version, source = client.alert_rules()
    if source == "built-in":
        typer.echo("# none stored: the alerter uses its built-in configuration, which follows")
    typer.echo(text, nl=not text.endswith("\n"))
