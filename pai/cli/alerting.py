"""`pai alert-rules`: check an alerting configuration, store it for the running alerter, show it.

`check` reads the file and lists every problem with its YAML path; `set` checks, then writes it
to the JetStream KV bucket the alerter watches, so the next evaluation uses it without a restart;
`show` prints what is stored. Nothing reaches the bus unless the file is valid.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from services.alerter.core.config import AlertConfig, ConfigError, load_config

alert_rules_app = typer.Typer(no_args_is_help=True, help="Check and change the alerting rules and routes.")

NatsUrl = Annotated[
    str, typer.Option("--nats-url", envvar="PAI_NATS_URL", help="The platform's NATS server.")
]

NatsUser = Annotated[
    str | None,
    typer.Option("--nats-user", envvar="PAI_NATS_USER", help="The bus user (embedded: admin)."),
]
NatsPassword = Annotated[
    str | None,
    typer.Option(
        "--nats-password",
        envvar="PAI_NATS_PASSWORD",
        help="The bus user's password (embedded: the admin entry of <data dir>/nats-credentials.json).",
    ),
]
NatsCa = Annotated[
    Path | None,
    typer.Option(
        "--nats-ca",
        envvar="PAI_NATS_CA",
        help="The authority the bus's TLS certificate is checked against (embedded: "
        "<data dir>/tls/nats-ca.pem); the password is sent to a server it vouches for only.",
    ),
]


def _load(path: Path) -> tuple[str, AlertConfig]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        typer.echo(f"error: cannot read the alerting file {str(path)!r}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None
    try:
        return text, load_config(text)
    except ConfigError as exc:
        for problem in exc.problems:
            typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(1) from None


def _summary(config: AlertConfig) -> str:
    rules, receivers, inhibitions = len(config.rules), len(config.receivers), len(config.inhibit_rules)
    return f"{rules} rules, {receivers} receivers, {inhibitions} inhibit rules"


@alert_rules_app.command()
def check(file: Annotated[Path, typer.Argument(help="An alerting configuration (YAML).")]) -> None:
    """Validate a file and print its problems, or OK."""
    _, config = _load(file)
    typer.echo(f"OK: {_summary(config)}")


async def _store(url: str, text: str, user: str | None, password: str | None, ca: Path | None) -> int:
    from libs.backbone.connecting import connect
    from services.alerter.adapters.rules_store import put_rules

    bus = await connect(url, name="pai-cli", initial_timeout=5.0, user=user, password=password, ca=ca)
    try:
        return await put_rules(bus.js, text)
    finally:
        await bus.close()


async def _fetch(url: str, user: str | None, password: str | None, ca: Path | None) -> str | None:
    from libs.backbone.connecting import connect
    from services.alerter.adapters.rules_store import get_rules

    bus = await connect(url, name="pai-cli", initial_timeout=5.0, user=user, password=password, ca=ca)
    try:
        return await get_rules(bus.js)
    finally:
        await bus.close()


@alert_rules_app.command("set")
def set_rules(
    file: Annotated[Path, typer.Argument(help="An alerting configuration (YAML).")],
    nats_url: NatsUrl = "nats://127.0.0.1:4222",
    nats_user: NatsUser = None,
    nats_password: NatsPassword = None,
    nats_ca: NatsCa = None,
) -> None:
    """Validate a file and make it the running alerter's configuration."""
    text, config = _load(file)
    try:
        revision = asyncio.run(_store(nats_url, text, nats_user, nats_password, nats_ca))
    except ConnectionError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"stored: {_summary(config)} (revision {revision}); applied at the next evaluation")


@alert_rules_app.command()
def show(
    nats_url: NatsUrl = "nats://127.0.0.1:4222",
    nats_user: NatsUser = None,
    nats_password: NatsPassword = None,
    nats_ca: NatsCa = None,
) -> None:
    """Print the stored configuration (the built-in one is used while none is stored)."""
    try:
        text = asyncio.run(_fetch(nats_url, nats_user, nats_password, nats_ca))
    except ConnectionError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(text if text is not None else "# none stored: the alerter uses its built-in configuration")
