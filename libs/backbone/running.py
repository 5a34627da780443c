"""Running a service's main coroutine with a clean, signal-driven shutdown.

Kubernetes and ``pai up`` stop a service with SIGTERM (Ctrl-C gives SIGINT). Both only set a
stop event: the service stops fetching, finishes in-flight work, drains its connection and
returns, and the process exits 0. A second signal while draining stops waiting and exits
non-zero, for the operator who really wants it gone.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger(__name__)

Main = Callable[[asyncio.Event], Awaitable[None]]

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


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


def run_service(main: Main) -> None:
    """The body of a service's ``__main__``: run ``main`` and exit 0 once it returns after a stop.

    Whatever a service writes (secrets, the database, logs, the bus's store) is its own: files
    0600 and directories 0700, unless it says otherwise (a task's directories, see the
    orchestrator's isolation.py).
    """
    os.umask(0o077)
    try:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            runner.run(run_until_stopped(main))
    except asyncio.CancelledError:
        sys.exit(130)
    log.info("service stopped")
    sys.exit(0)
