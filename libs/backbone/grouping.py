"""Group commit: writes handed in concurrently share one transaction.

SQLite has one writer at a time, and every transaction costs a round of hand-offs to the
database thread and a commit. Under a burst (many submissions, many events) committing each
write on its own queues them all behind each other; a ``GroupCommit`` instead commits together
whatever arrived while the previous commit ran. Each caller still waits for its own item's
commit and gets its own result or error: a batch that fails as a whole is retried item by item,
so one bad item (a duplicate name, a malformed event) fails alone.

Used by REST (the projection's events, the submissions' rows) and by the orchestrator, which
decides a job's queued events together and writes the job's state once for them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import structlog

log = structlog.get_logger(__name__)
T = TypeVar("T")
R = TypeVar("R")


class GroupCommit(Generic[T, R]):
    """Commits items handed in concurrently in groups of at most ``max_batch``.

    ``many`` writes a group in one transaction and returns one result per item, in order;
    ``one`` writes a single item in its own transaction (used when a group fails).
    """

    def __init__(
        self,
        many: Callable[[Sequence[T]], Awaitable[Sequence[R]]],
        one: Callable[[T], Awaitable[R]],
        *,
        max_batch: int = 64,
    ) -> None:
        self._many = many
        self._one = one
        self.max_batch = max_batch
        self._waiting: list[tuple[T, asyncio.Future[R]]] = []
        self._writer: asyncio.Task[None] | None = None

    @property
    def idle(self) -> bool:
        """Nothing waits and nothing is being written."""
        return not self._waiting and (self._writer is None or self._writer.done())

    async def submit(self, item: T) -> R:
        """Write ``item``; returns (or raises) once its group is committed."""
        done: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write())
        return await done

    async def _write(self) -> None:
        # Started on the next turn of the loop, so callers woken together share the first commit.
        batch: list[tuple[T, asyncio.Future[R]]] = []
        try:
            while self._waiting:
                batch, self._waiting = self._waiting[: self.max_batch], self._waiting[self.max_batch :]
                try:
                    results = await self._many([item for item, _ in batch])
                except Exception as exc:
                    log.warning(
                        "a group failed; its items are written one by one",
                        items=len(batch),
                        error=f"{type(exc).__name__}: {exc}",
                    )
                    await self._one_by_one(batch)
                    continue
                for (_, done), result in zip(batch, results, strict=True):
                    if not done.done():
                        done.set_result(result)
        except BaseException as exc:  # cancelled, or the process is going down: tell every caller
            waiting, self._waiting = [*batch, *self._waiting], []
            for _, done in waiting:
                if not done.done():
                    if isinstance(exc, asyncio.CancelledError):
                        done.cancel()
                    else:
                        done.set_exception(exc)
            raise

    async def _one_by_one(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        for item, done in batch:
            try:
                result = await self._one(item)
            except Exception as exc:
                if not done.done():
                    done.set_exception(exc)
            else:
                if not done.done():
                    done.set_result(result)

    async def close(self) -> None:
        """Stop the writer; callers still waiting are cancelled."""
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
        for _, done in self._waiting:
            done.cancel()
        self._waiting = []
