"""Running a service's main coroutine with a clean, signal-driven shutdown.

Kubernetes and ``pai up`` stop a service with SIGTERM (Ctrl-C gives SIGINT). Both only set a
stop event: the service stops fetching, finishes in-flight work, drains its connection and
returns, and the process exits 0. A second signal while draining stops waiting and exits
non-zero, for the operator who really wants it gone.

The drain is bounded: with the bus down, a drain or a fetch can wait on a server that is not
there, so a service still running ``STOP_WITHIN`` seconds after the first signal cancels its
work, and one that has not exited half a second later exits at once. Nothing is lost that a
crash would not lose: unacknowledged messages are delivered again, and every handler is
idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable

import structlog

from libs.backbone.settings import BackboneSettings
from libs.backbone.tracing import configure_tracing

log = structlog.get_logger(__name__)

Main = Callable[[asyncio.Event], Awaitable[None]]

_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Seconds a stopping service may drain before it is cut short; `pai up` kills after 2.5 s.
STOP_WITHIN = float(os.environ.get("PAI_STOP_WITHIN_SECONDS", "1.5"))


async def process_ended(pid: int) -> bool:
    """Until process ``pid`` ends, awaited on its pidfd (readable once it has ended, Linux 5.3 and
    later) without a thread or a poll. True once it has ended, or when it was already gone;
    False at once where no pidfd can be opened for it (no pidfd support): the caller polls."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    except (AttributeError, OSError):
        return False
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not ended.done():
            ended.set_result(None)

    loop.add_reader(pidfd, readable)
    try:
        await ended
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
    return True


def _exit_now() -> None:
    # Plain write: the logger's lock may be held by the very thing that hangs.
    with contextlib.suppress(OSError):
        os.write(2, b"still running after the stop was requested; exiting now\n")
    os._exit(1)


def arm_exit_watchdog(within: float = STOP_WITHIN + 0.5) -> threading.Timer:
    """Exit the process if it is still alive ``within`` seconds from now (a stop that hangs)."""
    timer = threading.Timer(within, _exit_now)
    timer.daemon = True
    timer.start()
    return timer


def _cut_short(task: asyncio.Task[object]) -> None:
    if not task.done():
        log.warning("stop is taking too long; abandoning in-flight work", within=STOP_WITHIN)
        task.cancel()


async def run_until_stopped(main: Main, *, stop: asyncio.Event | None = None) -> None:
    """Run ``main(stop)`` with SIGTERM/SIGINT setting ``stop``; a second signal cancels ``main``."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    task = asyncio.current_task()

    def on_signal(sig: signal.Signals) -> None:
        if stop.is_set():
            log.warning("second signal; abandoning in-flight work", signal=sig.name)
            if task is not None:
                task.cancel()
            return
        log.info("stop requested", signal=sig.name)
        stop.set()
        if task is not None:
            loop.call_later(STOP_WITHIN, _cut_short, task)
        arm_exit_watchdog()

    for sig in _SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await main(stop)
    finally:
        for sig in _SIGNALS:
            loop.remove_signal_handler(sig)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The services' event loop: uvloop where it is installed (less CPU per message and request
    than asyncio's own loop), else asyncio's."""
    try:
        import uvloop
    except ImportError:  # a platform uvloop does not support
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run_service(main: Main, settings: BackboneSettings | None = None) -> None:
    """The body of a service's ``__main__``: run ``main`` and exit 0 once it returns after a stop.

    With ``settings``, the service's spans go where they say (``PAI_OTEL_EXPORTER``), flushed
    when it ends, so a job's trace has a span from every service it crosses.
    Whatever a service writes (secrets, the database, logs, the bus's store) is its own: files
    0600 and directories 0700, unless it says otherwise (a task's directories, see the
    orchestrator's isolation.py).
    """
    os.umask(0o077)
    provider = configure_tracing(settings) if settings is not None else None
    try:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            runner.run(run_until_stopped(main))
    except asyncio.CancelledError:
        sys.exit(130)
    finally:
        if provider is not None:
            provider.shutdown()
    log.info("service stopped")
    sys.exit(0)
