"""`pai up`: the whole platform on this machine until Ctrl-C or SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import typer

from libs.embedded.platform import EmbeddedPlatform


def up(
    data_dir: Path = typer.Option(
        Path(".pai"), "--data-dir", help="Where jobs, logs and the bus keep their state."
    ),
    port: int | None = typer.Option(
        None, "--port", help="API port (default 9186, or a free one when taken)."
    ),
) -> None:
    """Start NATS and every service; stop them all cleanly on Ctrl-C or SIGTERM."""
    platform = EmbeddedPlatform(data_dir, api_port=port, admin_password=os.environ.get("PAI_ADMIN_PASSWORD"))
    try:
        asyncio.run(_run(platform))
    except (OSError, TimeoutError) as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from None


async def _run(platform: EmbeddedPlatform) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        info = await platform.start()
        typer.echo(f"pai is up: API {info.api_url}  (NATS {info.nats_url}, data {info.data_dir})")
        if info.portal_url:
            typer.echo(f"portal: {info.portal_url}")
        typer.echo(f"metrics: {info.metrics_url}")
        if info.admin_password:
            typer.echo(f"admin login: user admin, password {info.admin_password}")
        else:
            typer.echo("admin login: user admin, with the password chosen at the first start")
        typer.echo(f"try: pai login --server {info.api_url} && pai job submit examples/hello.yaml")
        typer.echo("press Ctrl-C to stop")
        await stop.wait()
        typer.echo("stopping ...")
    finally:
        await platform.stop()
    typer.echo("stopped")
