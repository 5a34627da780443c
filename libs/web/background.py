"""An HTTP service's background tasks in one task group: one that raises stops the service.

Resources stay in aiohttp's ``cleanup_ctx`` (opened in order, closed in reverse). What runs
beside the requests (a consumer, a watch, a heartbeat, a repair loop) is started on the
application's ``Background`` (``app[BACKGROUND].start(...)``): its tasks run in one
``asyncio.TaskGroup``, held by a task of its own for the application's life. A task that raises
cancels the others and ends the group with its error; ``serve_sites`` (serving.py) sees that and
stops the service, whose cleanup raises the error with its traceback, so the process exits
non-zero and its supervisor (`pai up`, Kubernetes) starts it again. Before, such a task failed
unseen and the service went on without it.

``background_ctx`` is the first cleanup context, so the group outlives every other: each context
stops its own tasks (``Background.stop``) before it closes what they use, and the group's close
is last.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

import structlog
from aiohttp import web

log = structlog.get_logger(__name__)

T = TypeVar("T")

# How long the group's close waits for a task that ignores its cancellation (a client opening a
# watch can swallow one) before leaving it behind.
CLOSE_WITHIN = 5.0


class Background:
    """One task group for an application's background tasks, held open by a task of its own."""

    def __init__(self) -> None:
        self._group: asyncio.TaskGroup | None = None
        self._holder: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()

    async def open(self) -> None:
        opened = asyncio.get_running_loop().create_future()

        async def hold() -> None:
            async with asyncio.TaskGroup() as group:
                self._group = group
                opened.set_result(None)
                await self._closing.wait()
                for task in self._tasks:  # left by no cleanup context: nothing waits for them
                    task.cancel()

        self._holder = asyncio.create_task(hold(), name="background")
        await opened

    @property
    def ended(self) -> asyncio.Task[None]:
        """Done once the group has ended: a task raised (its error, in an ExceptionGroup) or the
        group was closed."""
        if self._holder is None:
            raise RuntimeError("the background group is not open")
        return self._holder

    def start(self, coro: Coroutine[Any, Any, T], *, name: str) -> asyncio.Task[T]:
        """Run ``coro`` in the group: if it raises, the service stops with its error."""
        if self._group is None:
            coro.close()
            raise RuntimeError("the background group is not open")
        try:
            task = self._group.create_task(coro, name=name)
        except RuntimeError:  # the group is shutting down after a failure
            coro.close()
            raise
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @staticmethod
    async def stop(task: asyncio.Task[Any], *, within: float | None = None) -> None:
        """Wait until ``task`` ends: for ever (None), or ``within`` seconds and then cancel it (at
        once when 0), waiting at most ``CLOSE_WITHIN`` more for a task that ignores the cancel.
        Never raises its error: the group reports that, once, when it closes."""
        if within is None:
            await asyncio.wait([task])
            return
        if within > 0:
            done, _ = await asyncio.wait([task], timeout=within)
            if done:
                return
        task.cancel()
        await asyncio.wait([task], timeout=CLOSE_WITHIN)

    async def close(self) -> None:
        """End the group once every cleanup context has stopped its tasks; raises the error of a
        task that failed (an ExceptionGroup)."""
        if self._holder is None:
            return
        self._closing.set()
        done, _ = await asyncio.wait([self._holder], timeout=CLOSE_WITHIN)
        if not done:
            log.warning("background tasks still running at close; left behind", tasks=len(self._tasks))
            return
        self._holder.result()


BACKGROUND = web.AppKey("background", Background)


async def background_ctx(app: web.Application) -> AsyncIterator[None]:
    """The first cleanup context of an application with background tasks."""
    background = Background()
    await background.open()
    app[BACKGROUND] = background
    try:
        yield
    finally:
        await background.close()


def background_ended(app: web.Application) -> asyncio.Task[None] | None:
    """The task that ends when the application's background group does, if it has one."""
    background = app.get(BACKGROUND)
    return background.ended if background is not None else None
