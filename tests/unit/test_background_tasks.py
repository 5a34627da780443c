"""An HTTP service's background tasks run in one task group (libs/web/background.py): one that
raises stops the service with its error after its cleanup ran; a stop ends every task and the
service returns."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
from aiohttp import web

from libs.web.background import BACKGROUND, Background, background_ctx
from libs.web.serving import serve_sites

pytestmark = pytest.mark.timeout(30)

CLOSED = web.AppKey("closed", list[str])
Work = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


def app_with(*work: tuple[str, Work]) -> web.Application:
    """An app whose one resource starts ``work`` (name, coroutine function) in the background and
    stops it (a stop event, then a wait) before it records itself closed."""
    app = web.Application()
    app[CLOSED] = []

    async def resource_ctx(app: web.Application) -> AsyncIterator[None]:
        stop = asyncio.Event()
        tasks = [app[BACKGROUND].start(run(stop), name=name) for name, run in work]
        yield
        stop.set()
        for task in tasks:
            await Background.stop(task, within=1.0)
        app[CLOSED].append("resource")

    app.cleanup_ctx.append(background_ctx)
    app.cleanup_ctx.append(resource_ctx)
    return app


def local(runner: web.AppRunner) -> list[web.BaseSite]:
    return [web.TCPSite(runner, "127.0.0.1", 0)]


async def test_a_task_that_raises_stops_the_service_after_its_cleanup_and_cancels_the_others() -> None:
    cancelled = asyncio.Event()

    async def failing(stop: asyncio.Event) -> None:
        await asyncio.sleep(0)
        raise LookupError("planted")

    async def patient(stop: asyncio.Event) -> None:
        try:
            await asyncio.Event().wait()  # ignores stop: only a cancel ends it
        except asyncio.CancelledError:
            cancelled.set()
            raise

    app = app_with(("failing", failing), ("patient", patient))
    stop = asyncio.Event()
    with pytest.raises(ExceptionGroup) as raised:
        await serve_sites(app, stop, local)
    assert raised.group_contains(LookupError, match="planted")
    assert cancelled.is_set()
    assert app[CLOSED] == ["resource"]
    assert not stop.is_set()
    # The exit watchdog armed for a cleanup that hangs is called off once the cleanup is done:
    # left armed, it would end this very process (here, the test run) seconds later.
    timers = [thread for thread in threading.enumerate() if isinstance(thread, threading.Timer)]
    for timer in timers:
        timer.join(timeout=1.0)
    assert not any(timer.is_alive() for timer in timers)


async def test_a_stop_ends_every_task_and_the_service_returns() -> None:
    ended: list[str] = []
    began = asyncio.Event()

    async def loop(stop: asyncio.Event) -> None:
        began.set()
        await stop.wait()
        ended.append("loop")

    app = app_with(("loop", loop))
    stop = asyncio.Event()
    serving = asyncio.create_task(serve_sites(app, stop, local))
    await began.wait()
    assert not serving.done()
    stop.set()
    await serving
    assert ended == ["loop"]
    assert app[CLOSED] == ["resource"]


async def test_no_task_starts_once_a_task_failed() -> None:
    background = Background()
    await background.open()

    async def failing() -> None:
        raise LookupError("planted")

    background.start(failing(), name="failing")
    await asyncio.wait([background.ended])

    async def late() -> None:
        pass

    coro = late()
    with pytest.raises(RuntimeError):
        background.start(coro, name="late")
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED  # never reported as never awaited
    with pytest.raises(ExceptionGroup):
        await background.close()
