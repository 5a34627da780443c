"""Serving an aiohttp application until the service is asked to stop, on TCP or a Unix socket.

A service serves until its stop event is set or until one of its background tasks raises
(libs/web/background.py): then it stops as it would at a signal and ends with that error.
"""

from __future__ import annotations

import asyncio
import os
import socket as sockets
import threading
from asyncio import FIRST_COMPLETED
from collections.abc import Callable, Sequence
from pathlib import Path

import structlog
from aiohttp import web

from libs.backbone.running import arm_exit_watchdog
from libs.web.addresses import check_socket_path
from libs.web.background import background_ended

log = structlog.get_logger(__name__)

# Seconds a service whose background task failed may take to stop before it exits at once.
FAILED_STOP_WITHIN = 10.0


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
    is set (or a background task fails, see ``serve_sites``), then drain it.

    The drain waits at most 5 s for requests in flight; the services that serve HTTP (the event
    gateway, the marketplace) all stop this way.
    """

    def sites(runner: web.AppRunner) -> list[web.BaseSite]:
        return [site(runner, host, port, socket)]

    def listening() -> None:
        if socket is None:
            log.info(f"{name} listening", host=host, port=port)
        else:
            log.info(f"{name} listening", socket=str(socket))

    await serve_sites(app, stop, sites, listening=listening)


async def serve_sites(
    app: web.Application,
    stop: asyncio.Event,
    sites: Callable[[web.AppRunner], Sequence[web.BaseSite]],
    *,
    shutdown_timeout: float = 5.0,
    listening: Callable[[], None] | None = None,
) -> None:
    """Serve ``app`` on ``sites`` until ``stop`` is set or its background task group ends (a task
    raised: libs/web/background.py), then drain it and run its cleanup contexts in reverse. The
    error of a background task that raised is raised here, after the cleanup, so the service
    ends with it (and its traceback) for its supervisor to start it again."""
    runner = web.AppRunner(app, shutdown_timeout=shutdown_timeout)
    watchdog: threading.Timer | None = None
    await runner.setup()
    try:
        for each in sites(runner):
            await each.start()
        if listening is not None:
            listening()
        if await _until_stopped(app, stop):
            # A cleanup that hangs (the bus gone) must not keep a broken service up: exit anyway.
            watchdog = arm_exit_watchdog(FAILED_STOP_WITHIN)
    finally:
        try:
            await runner.cleanup()
        finally:
            if watchdog is not None:
                watchdog.cancel()


async def _until_stopped(app: web.Application, stop: asyncio.Event) -> bool:
    """Until ``stop`` is set or the app's background group ends; True when the group ended first
    (a task failed)."""
    ended = background_ended(app)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([stopped] if ended is None else [stopped, ended], return_when=FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if ended is not None and ended.done() and not stop.is_set():
        error = ended.exception() if not ended.cancelled() else None
        # The traceback comes with the error itself, raised once the cleanup is done.
        log.error("a background task failed; stopping", error=repr(error))
        return True
    return False
