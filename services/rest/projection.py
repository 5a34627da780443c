"""The projection handler: each job event off the durable consumer into the SQL read model.

Decoding is strict (a message that is not an event is terminated by the consume loop, not
retried forever); a database that is briefly unavailable raises and the loop retries with a
growing delay. ``apply_events`` records event ids, so redeliveries change nothing twice.

The consume loop hands over one message per job at a time, many jobs at once. Committing each
on its own would queue every commit (and the API's writes) behind the others on SQLite's one
writer, so the ``Projector`` commits together what arrived while the previous commit ran (a
group commit, libs/backbone/grouping.py): a handler returns, and its message is acked, only once its
event is committed. A batch that fails as a whole is retried event by event, so one bad event
fails alone. One job's events come in stream order, several at a time (the consume loop's
pipeline), and share a commit too: a job of 10,000 tasks is not 20,000 transactions.
"""

from __future__ import annotations

import functools

from nats.aio.msg import Msg
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from libs.backbone.consuming import Handler
from libs.backbone.errors import TemporaryError
from libs.backbone.grouping import GroupCommit
from libs.protocol.events import EventBase, decode_event
from services.rest.adapters.projecting import apply_event, apply_events

# Bounds how long one commit holds SQLite's writer, and so how long a submission may wait for it.
MAX_BATCH = 64


class Projector:
    """Applies events handed in concurrently, committing each group that gathers in one transaction."""

    def __init__(self, engine: AsyncEngine, *, max_batch: int = MAX_BATCH) -> None:
        self.engine = engine
        self._group: GroupCommit[EventBase, bool] = GroupCommit(
            functools.partial(apply_events, engine),
            functools.partial(apply_event, engine),
            max_batch=max_batch,
        )

    async def apply(self, event: EventBase) -> bool:
        """Apply one event (False when applied before); returns once it is committed.

        The event takes its place in the commit order before this first waits, so events handed
        in one after another (a job's, pipelined by the consume loop) commit in that order.
        """
        return await self._group.submit(event)

    async def close(self) -> None:
        """Stop the writer (after the consume loop ended, nothing waits for it any more)."""
        await self._group.close()


def projection_handler(projector: Projector) -> Handler:
    async def handle(msg: Msg) -> None:
        event = decode_event(msg.data)
        try:
            await projector.apply(event)
        except OperationalError as exc:
            raise TemporaryError(f"database unavailable: {exc.orig}", delay=1.0) from exc

    return handle
