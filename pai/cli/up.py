"""`pai up`: the whole platform on this machine until Ctrl-C or SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import typer

from libs.backbone.busauth import CREDENTIALS_FILE
from libs.protocol import simulated_gpus
from pai.embedded import mps
from pai.embedded.platform import EmbeddedPlatform, embedded_defaults
from services.monitor.adapters.inventory import offer_line
from services.orchestrator.adapters.isolation import containment_line, engine_line
from services.rest.routes.ratelimit import configured_limits
from services.rest.settings import RestSettings


def up(
    data_dir: Path = typer.Option(
        Path(".pai"), "--data-dir", help="Where jobs, logs and the bus keep their state."
    ),
    port: int | None = typer.Option(
        None,
        "--port",
        help="API port (default: the last run's, else 9186, else a free one; the portal's and the "
        "metrics' are free ones, remembered in <data dir>/platform.json).",
    ),
    gpus: str | None = typer.Option(
        None,
        "--gpus",
        help="On a machine without NVIDIA GPUs: declare N simulated GPUs (N or N:MODEL, e.g. 8:V100) "
        "so GPU jobs run end to end; their job detail says the GPUs were simulated.",
    ),
) -> None:
    """Start NATS and every service; keep them running (restarted if they exit).

    Ctrl-C or SIGTERM stops the bus and every service within a few seconds;
    a second Ctrl-C kills them at once. Running tasks are not stopped: they
    keep running on this machine and the next `pai up` on the same data dir
    adopts them and reports how they ended (`pai job stop` ends them first).
    """
    extra_env: dict[str, str] = {}
    if gpus is not None:
        try:
            extra_env[simulated_gpus.ENV] = str(simulated_gpus.parse(gpus))
        except simulated_gpus.SimulatedGpusError as exc:
            raise typer.BadParameter(str(exc), param_hint="--gpus") from None
    try:
        mps.setting_of(os.environ)
    except ValueError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None
    platform = EmbeddedPlatform(
        data_dir, api_port=port, admin_password=os.environ.get("PAI_ADMIN_PASSWORD"), extra_env=extra_env
    )
    try:
        asyncio.run(_run(platform))
    except (OSError, TimeoutError) as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from None


async def _run(platform: EmbeddedPlatform) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set():
            typer.echo("second stop request: killing every process now")
            platform.kill()
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    try:
        info = await platform.start()
        typer.echo(f"pai is up: API {info.api_url}  (NATS {info.nats_url}, data {info.data_dir})")
        if info.portal_url:
            typer.echo(f"portal: {info.portal_url}")
        typer.echo(f"metrics: {info.metrics_url}")
        if gpus_line := _gpus_line(platform):
            typer.echo(gpus_line)
        typer.echo(f"GPU shares: {platform.mps.enforcement.describe()}")
        typer.echo(_limits_line(platform))
        # What holds for tasks, decided as the orchestrator decides it (same machine, same user).
        typer.echo(containment_line(platform.data_dir, {**os.environ, **platform.extra_env}))
        typer.echo(offer_line({**os.environ, **embedded_defaults(), **platform.extra_env}))
        typer.echo(engine_line(platform.data_dir, {**os.environ, **platform.extra_env}))
        typer.echo(
            f"bus: user {info.nats_user}, password in {info.data_dir / CREDENTIALS_FILE} "
            f"(tasks get neither); TLS, verified against {info.nats_ca}"
        )
        typer.echo(f"services talk over the sockets in {info.sockets_dir} (no TCP port between them)")
        if info.admin_password:
            typer.echo(f"admin login: user admin, password {info.admin_password}")
        else:
            typer.echo("admin login: user admin, with the password chosen at the first start")
        typer.echo(f"try: pai login --server {info.api_url} && pai job submit examples/hello.yaml")
        typer.echo("press Ctrl-C to stop")
        await stop.wait()
        typer.echo("stopping ... (Ctrl-C again to kill at once)")
        tasks = platform.running_tasks()
    finally:
        await platform.stop()
    typer.echo("stopped")
    if tasks:
        typer.echo(
            f"{tasks} task process(es) keep running; the next `pai up --data-dir {platform.data_dir}` "
            "adopts them (`pai job stop` ends a job's tasks)"
        )


def _gpus_line(platform: EmbeddedPlatform) -> str:
    declared = platform.extra_env.get(simulated_gpus.ENV)
    if declared:
        found = simulated_gpus.parse(declared)
        return (
            f"GPUs: {found.count} simulated ({found.model}); real NVIDIA GPUs, when found, are used instead"
        )
    return ""


def _limits_line(platform: EmbeddedPlatform) -> str:
    """The request limits the API applies, as the REST service will read them."""
    applied = {**embedded_defaults(), **platform.extra_env}
    overrides: dict[str, Any] = {
        name.removeprefix("PAI_").lower(): int(value)
        for name, value in applied.items()
        if name.startswith("PAI_RATE_LIMIT_") and value.isdigit()
    }
    settings = RestSettings(**overrides)
    parts = [
        f"{limit.counts} {limit.described()}" if limit.amount else f"{limit.counts}: none ({limit.setting}=0)"
        for limit in configured_limits(settings)
    ]
    return "limits: " + "; ".join(parts)
