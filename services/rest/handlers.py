"""The projection's handlers: each job event off the durable consumer into the SQL read model.

Every event of the job stream reaches REST through one durable consumer (``rest-projection``):
``projection_handler`` decodes it and hands it to the ``Projector``, which writes it by the rule
``HANDLERS`` names for its type (cosmicpython's message bus: a table from message type to handler,
the handlers' SQL in adapters/projecting.py). A type the table does not name changes nothing; a
``job.submitted`` makes the job's row when the submission's own insert did not (a rebuild, or
another replica's submission).

Decoding is strict (a message that is not an event is terminated by the consume loop, not
retried forever); a database that is briefly unavailable raises and the loop retries with a
growing delay. Event ids are recorded with what they change, so redeliveries change nothing twice.

The consume loop hands over one message per job at a time, many jobs at once. Committing each
on its own would queue every commit (and the API's writes) behind the others on SQLite's one
writer, so the ``Projector`` commits together what arrived while the previous commit ran (a
group commit, libs/backbone/grouping.py): a handler returns, and its message is acked, only once its
event is committed. A batch that fails as a whole is retried event by event, so one bad event
fails alone. One job's events come in stream order, several at a time (the consume loop's
pipeline), and share a commit too: a job of 10,000 tasks is not 20,000 transactions.

A scheduler decision carrying its leader's epoch counts only if that leader was not deposed
when the decision was stored (libs/protocol/fencing.py): the one rule the scheduler and the
orchestrator apply, so a late decision changes nothing a user reads either. The fences are read
by the writer, which takes events in order, not by the handler: a handler that awaited a read
before handing its event in would let the job's later events overtake it. A fence still being
raised holds the writer until it has its cut (a new leader's two writes, or, when it died
between them, its successor's), so no event is applied past an undecided decision; one still
undecided after ``FENCE_PATIENCE`` is retried later, with its job's later events of the group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass

import nats.errors
import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from libs.backbone.consuming import Handler
from libs.backbone.errors import TemporaryError
from libs.backbone.fencing import FenceReader
from libs.backbone.grouping import GroupCommit
from libs.protocol.events import (
    EventBase,
    JobCompleted,
    JobPending,
    JobPreempting,
    JobRetrying,
    JobScheduled,
    JobStopRequested,
    JobTagged,
    TaskCompleted,
    TaskStarted,
    decode_event,
)
from libs.protocol.fencing import Fence, deposed
from services.rest.adapters import projecting

log = structlog.get_logger(__name__)

# One handler per type of event about an existing job; other types change nothing here.
HANDLERS: projecting.Rules = {
    JobPending: projecting.job_pending,
    JobScheduled: projecting.job_scheduled,
    JobPreempting: projecting.job_preempting,
    TaskStarted: projecting.task_started,
    TaskCompleted: projecting.task_completed,
    JobRetrying: projecting.job_retrying,
    JobCompleted: projecting.job_completed,
    JobStopRequested: projecting.job_stop_requested,
    JobTagged: projecting.job_tagged,
}

# Bounds how long one commit holds SQLite's writer, and so how long a submission may wait for it.
MAX_BATCH = 64
# The scheduler's decisions; those stamped with an epoch are fenced (the scheduler's own list).
DECISIONS = (JobScheduled, JobPending, JobPreempting, JobCompleted)
# How long the writer waits for a fence being raised to get its cut: more than a lease's TTL and
# a standby's poll (libs/backbone/leasing.py), within which a leader that died between its
# fence's two writes is replaced and its fence finished by the successor.
FENCE_PATIENCE = 10.0
FENCE_POLL = 0.1


async def apply_events(
    engine: AsyncEngine, events: Sequence[EventBase], *, ignored: Collection[str] = frozenset()
) -> list[bool]:
    """Apply events by ``HANDLERS`` in one transaction, in the order given; per event, False when
    applied before (or in ``ignored``: recorded, nothing else changed). All or nothing."""
    return await projecting.write_events(engine, events, HANDLERS, ignored=ignored)


async def apply_event(engine: AsyncEngine, event: EventBase) -> bool:
    """Apply one event; False when it was applied before (nothing changes)."""
    return (await apply_events(engine, [event]))[0]


Fences = Callable[[], Awaitable[tuple[Fence, ...]]]
"""Reads the scheduler's fences as they are now."""


def fences_on(js: JetStreamContext) -> Fences:
    """The fences in the bus's PAI_FENCES bucket, the bucket opened at the first read."""
    reader: FenceReader | None = None

    async def read() -> tuple[Fence, ...]:
        nonlocal reader
        if reader is None:
            reader = await FenceReader.open(js)
        return await reader.fences()

    return read


@dataclass(frozen=True)
class _Item:
    event: EventBase
    sequence: int | None  # where the job stream stored it; None: not fenced

    @property
    def fenced(self) -> bool:
        return (
            self.sequence is not None and isinstance(self.event, DECISIONS) and self.event.epoch is not None
        )


_Outcome = bool | TemporaryError


class Projector:
    """Applies events handed in concurrently, committing each group that gathers in one transaction."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        fences: Fences | None = None,
        max_batch: int = MAX_BATCH,
        fence_patience: float = FENCE_PATIENCE,
    ) -> None:
        self.engine = engine
        self._fences = fences
        self._patience = fence_patience
        self._group: GroupCommit[_Item, _Outcome] = GroupCommit(
            self._write, self._write_one, max_batch=max_batch
        )

    async def apply(self, event: EventBase, sequence: int | None = None) -> bool:
        """Apply one event (False when applied before, or a deposed leader's decision); returns
        once it is committed. ``sequence`` is where the job stream stored it: a scheduler
        decision with an epoch is checked against the fences only when it is given.

        The event takes its place in the commit order before this first waits, so events handed
        in one after another (a job's, pipelined by the consume loop) commit in that order.
        """
        outcome = await self._group.submit(_Item(event, sequence))
        if isinstance(outcome, TemporaryError):
            raise outcome
        return outcome

    async def close(self) -> None:
        """Stop the writer (after the consume loop ended, nothing waits for it any more)."""
        await self._group.close()

    async def _write_one(self, item: _Item) -> _Outcome:
        return (await self._write([item]))[0]

    async def _write(self, items: Sequence[_Item]) -> list[_Outcome]:
        """Apply a group in order: a deposed leader's decisions recorded but not applied; one whose
        fence stayed undecided past the patience, and its job's later events, left to be retried."""
        verdicts = await self._verdicts(items)
        ignored = {items[i].event.event_id for i, verdict in verdicts.items() if verdict}
        held: set[str] = set()  # jobs with an undecided decision: their later events wait too
        outcomes: list[_Outcome | None] = []
        kept: list[EventBase] = []
        for index, item in enumerate(items):
            job_id: str | None = getattr(item.event, "job_id", None)
            if (index in verdicts and verdicts[index] is None) or (job_id is not None and job_id in held):
                if job_id is not None:
                    held.add(job_id)
                outcomes.append(TemporaryError("a new scheduler leader is raising its fence", delay=0.5))
                continue
            if item.event.event_id in ignored:
                log.warning(
                    "ignoring a decision of a deposed scheduler leader",
                    type=getattr(item.event, "type", None),
                    job_id=job_id,
                    epoch=getattr(item.event, "epoch", None),
                    sequence=item.sequence,
                )
            outcomes.append(None)
            kept.append(item.event)
        applied = iter(await apply_events(self.engine, kept, ignored=ignored))
        return [next(applied) if outcome is None else outcome for outcome in outcomes]

    async def _verdicts(self, items: Sequence[_Item]) -> dict[int, bool | None]:
        """Per fenced decision of the group (by index): deposed (True), counts (False) or still
        undecided after the patience (None). One read of the fences answers for the whole group:
        each of its events was stored before the read."""
        fenced = {index: item for index, item in enumerate(items) if item.fenced}
        if not fenced or self._fences is None:
            return {}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._patience
        while True:
            verdicts: dict[int, bool | None] = dict.fromkeys(fenced)
            try:
                fences = await self._fences()
            except (nats.errors.Error, TimeoutError) as exc:
                error: str | None = f"{type(exc).__name__}: {exc}"
            else:
                error = None
                for index, item in fenced.items():
                    verdicts[index] = deposed(getattr(item.event, "epoch", None), item.sequence or 0, fences)
            if None not in verdicts.values() or loop.time() >= deadline:
                if error is not None or None in verdicts.values():
                    log.warning("the scheduler's fence stayed undecided; retrying later", error=error)
                return verdicts
            await asyncio.sleep(FENCE_POLL)


def projection_handler(projector: Projector) -> Handler:
    async def handle(msg: Msg) -> None:
        event = decode_event(msg.data)
        try:
            await projector.apply(event, msg.metadata.sequence.stream)
        except OperationalError as exc:
            raise TemporaryError(f"database unavailable: {exc.orig}", delay=1.0) from exc

    return handle
