"""Serving an aiohttp application until the service is asked to stop, on TCP or a Unix socket."""

from __future__ import annotations

import asyncio
import os
import socket as sockets
from pathlib import Path

import structlog
from aiohttp import web

from libs.web.addresses import check_socket_path

log = structlog.get_logger(__name__)


def inherited_socket(fd: int) -> sockets.socket:
    """The listening socket a supervisor handed down as descriptor ``fd``.

    `pai up` binds the public ports (the API, the portal, the metrics) itself and keeps them open
    while the service behind each restarts: the port is never free for another process to take,
    and two platforms never pick the same one (pai/embedded/platform.py).
    """
    return sockets.socket(fileno=fd)


def site(runner: web.BaseRunner, host: str, port: int, socket: Path | None) -> web.BaseSite:
    """Where ``runner`` listens: the socket file when one is named, else ``host:port``.

    A socket is made readable and writable by its owner only (its directory already keeps everyone
    else out, see ``addresses.private_directory``); a stale one left by a crash is replaced.
    """
    if socket is None:
        return web.TCPSite(runner, host, port)
    check_socket_path(socket)
    return _PrivateUnixSite(runner, str(socket))


class _PrivateUnixSite(web.UnixSite):
    async def start(self) -> None:
        await super().start()  # asyncio replaces a stale socket file left at this path
        os.chmod(self._path, 0o600)


async def serve_until_stopped(
    app: web.Application,
    host: str,
    port: int,
    stop: asyncio.Event,
    *,
    name: str,
    socket: Path | None = None,
) -> None:
    """Serve ``app`` on ``host:port``, or on the Unix socket ``socket`` when given, until ``stop``
    is set, then drain it.

    The drain waits at most 5 s for requests in flight; the services that serve HTTP (the event
    gateway, the marketplace) all stop this way.
    """
    runner = web.AppRunner(app, shutdown_timeout=5.0)
    await runner.setup()
    await site(runner, host, port, socket).start()
    if socket is None:
        log.info(f"{name} listening", host=host, port=port)
    else:
        log.info(f"{name} listening", socket=str(socket))
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
