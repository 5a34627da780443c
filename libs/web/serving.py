"""Serving an aiohttp application until the service is asked to stop."""

from __future__ import annotations

import asyncio

import structlog
from aiohttp import web

log = structlog.get_logger(__name__)


async def serve_until_stopped(
    app: web.Application, host: str, port: int, stop: asyncio.Event, *, name: str
) -> None:
    """Serve ``app`` on ``host:port`` until ``stop`` is set, then drain it.

    The drain waits at most 5 s for requests in flight; the services that serve HTTP (the event
    gateway, the marketplace) all stop this way.
    """
    runner = web.AppRunner(app, shutdown_timeout=5.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    log.info(f"{name} listening", host=host, port=port)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
