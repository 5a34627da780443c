"""One sequential queue per key, many keys in parallel.

Events about one job must be handled in order (a job's "completed" after its "started"), but
one slow job must not hold up the others. ``KeyedWorkQueue`` runs the work submitted under a
key strictly one after another, in submission order, while work under different keys runs
concurrently. A worker task exists only while its key has work, so a million finished jobs
leave nothing behind. A failing work item is logged and does not stop its key's queue.

With ``pipeline`` above one, up to that many queued items of a key run at once, *started* in
submission order: each runs until it first waits before the next one starts. That keeps a key's
order for work that takes its place in an ordered sink before it waits (a group commit: the
REST projection commits a job's events together, in stream order, instead of one transaction
each), while the next items need not wait for the previous one to finish.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger(__name__)

Work = Callable[[], Awaitable[None]]


class KeyedWorkQueue:
    """Runs work sequentially per key and concurrently across keys.

    ``limit`` bounds the items queued or running across all keys; producers that respect it
    (``wait_for_room``) keep memory bounded and let a broker's redelivery do the buffering.
    """

    def __init__(self, *, limit: int = 256, pipeline: int = 1) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        if pipeline < 1:
            raise ValueError("pipeline must be at least 1")
        self.limit = limit
        self.pipeline = pipeline
        self._queues: dict[str, deque[Work]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._pending = 0
        self._changed = asyncio.Condition()
        self._closed = False

    @property
    def pending(self) -> int:
        """Items queued or running, over all keys."""
        return self._pending

    @property
    def room(self) -> int:
        """How many more items fit under the limit."""
        return max(0, self.limit - self._pending)

    @property
    def active_keys(self) -> int:
        return len(self._workers)

    def submit(self, key: str, work: Work) -> None:
        """Queue ``work`` behind earlier work of ``key``; never blocks (see ``wait_for_room``)."""
        if self._closed:
            raise RuntimeError("the queue is closed")
        queue = self._queues.setdefault(key, deque())
        queue.append(work)
        self._pending += 1
        if key not in self._workers:
            self._workers[key] = asyncio.create_task(self._run(key), name=f"keyed-work:{key}")

    async def _run(self, key: str) -> None:
        queue = self._queues[key]
        try:
            while queue:
                n = min(len(queue), self.pipeline)
                try:
                    if n == 1:
                        await self._guarded(key, queue[0])
                    else:  # gather starts them in order, each up to its first wait before the next
                        await asyncio.gather(*(self._guarded(key, queue[i]) for i in range(n)))
                finally:
                    for _ in range(n):
                        queue.popleft()
                    self._pending -= n
                    await self._notify()
        finally:
            # Dropped whether drained or cancelled; anything left was cancelled with it.
            self._pending -= len(queue)
            del self._queues[key]
            del self._workers[key]
            await self._notify()

    @staticmethod
    async def _guarded(key: str, work: Work) -> None:
        try:
            await work()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("keyed work failed", key=key)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_for_room(self, needed: int = 1) -> None:
        """Wait until ``needed`` more items fit under the limit (capped at the limit itself)."""
        needed = min(needed, self.limit)
        async with self._changed:
            await self._changed.wait_for(lambda: self.room >= needed)

    async def join(self) -> None:
        """Wait until every submitted item has run."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._pending == 0)

    async def close(self, *, cancel: bool = False) -> None:
        """Refuse new work, then wait for what is queued (or cancel it when ``cancel``)."""
        self._closed = True
        if cancel:
            workers = list(self._workers.values())
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        await self.join()
