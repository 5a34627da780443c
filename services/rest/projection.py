"""The projection handler: each job event off the durable consumer into the SQL read model.

Decoding is strict (a message that is not an event is terminated by the consume loop, not
retried forever); a database that is briefly unavailable raises and the loop retries with a
growing delay. ``apply_events`` records event ids, so redeliveries change nothing twice.

The consume loop hands over one message per job at a time, many jobs at once. Committing each
on its own would queue every commit (and the API's writes) behind the others on SQLite's one
writer, so the ``Projector`` commits together what arrived while the previous commit ran (a
group commit): a handler returns, and its message is acked, only once its event is committed.
A batch that fails as a whole is retried event by event, so one bad event fails alone.
"""

from __future__ import annotations

import asyncio
import contextlib

from nats.aio.msg import Msg
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from libs.backbone.consuming import Handler
from libs.backbone.errors import TemporaryError
from libs.protocol.events import EventBase, decode_event
from services.rest.adapters.projecting import apply_event, apply_events

# Bounds how long one commit holds SQLite's writer, and so how long a submission may wait for it.
MAX_BATCH = 64


class Projector:
    """Applies events handed in concurrently, committing each group that gathers in one transaction."""

    def __init__(self, engine: AsyncEngine, *, max_batch: int = MAX_BATCH) -> None:
        self.engine = engine
        self.max_batch = max_batch
        self._waiting: list[tuple[EventBase, asyncio.Future[bool]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def apply(self, event: EventBase) -> bool:
        """Apply one event (False when applied before); returns once it is committed."""
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.append((event, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write())
        return await done

    async def _write(self) -> None:
        # Started on the next turn of the loop, so handlers woken together share the first commit.
        while self._waiting:
            batch, self._waiting = self._waiting[: self.max_batch], self._waiting[self.max_batch :]
            try:
                results = await apply_events(self.engine, [event for event, _ in batch])
            except Exception:
                await self._one_by_one(batch)
                continue
            for (_, done), result in zip(batch, results, strict=True):
                if not done.done():
                    done.set_result(result)

    async def _one_by_one(self, batch: list[tuple[EventBase, asyncio.Future[bool]]]) -> None:
        for event, done in batch:
            try:
                result = await apply_event(self.engine, event)
            except Exception as exc:
                if not done.done():
                    done.set_exception(exc)
            else:
                if not done.done():
                    done.set_result(result)

    async def close(self) -> None:
        """Stop the writer (after the consume loop ended, nothing waits for it any more)."""
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer


def projection_handler(projector: Projector) -> Handler:
    async def handle(msg: Msg) -> None:
        event = decode_event(msg.data)
        try:
            await projector.apply(event)
        except OperationalError as exc:
            raise TemporaryError(f"database unavailable: {exc.orig}", delay=1.0) from exc

    return handle
