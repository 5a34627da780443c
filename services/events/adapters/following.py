"""One follower of the bus per gateway process, fanned out to every subscriber in memory.

At start the hub learns every job's owner, name and VC from the ``job.submitted`` events (one
per job, read by subject) and which job each alert is about, then follows each stream with a
JetStream ordered consumer from the sequence it had reached. Each event is decoded once and
offered to every subscriber whose rights and filters it passes, so a thousand idle
subscribers cost a thousand queues, not a thousand consumers.

A subscriber that resumes (``Last-Event-ID``/``since``) first reads the stream itself from its
cursor up to the sequence the hub had reached when it registered (``replay``), then takes the
hub's queue, which holds exactly what came after: nothing lost, nothing twice. A subscriber too
slow to keep up is closed (``overflowed``); it reconnects with its last id and resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import nats.errors
import orjson
import structlog
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from libs.backbone.consuming import subscribe_ordered
from libs.protocol.subjects import (
    ALERT_SUBJECTS,
    ALERTS_STREAM,
    JOB_SUBJECTS,
    JOBS_STREAM,
    MARKETPLACE_STREAM,
    MARKETPLACE_SUBJECTS,
    NODE_SUBJECTS,
    NODES_STREAM,
    job_subject,
)
from services.events.core import sse
from services.events.core.directory import JobDirectory, locate
from services.events.core.filters import Caller, EventFilter, wanted

log = structlog.get_logger(__name__)

STREAM_NAMES = {
    "jobs": JOBS_STREAM,
    "nodes": NODES_STREAM,
    "alerts": ALERTS_STREAM,
    "marketplace": MARKETPLACE_STREAM,
}
STREAM_SUBJECTS = {
    "jobs": JOB_SUBJECTS,
    "nodes": NODE_SUBJECTS,
    "alerts": ALERT_SUBJECTS,
    "marketplace": MARKETPLACE_SUBJECTS,
}
REPLAY_PATIENCE = 30.0


@dataclass(frozen=True)
class Item:
    """One event as subscribers receive it."""

    stream: str
    sequence: int
    type: str
    job_id: str | None
    data: bytes
    published: float  # when the bus stored it (seconds since the epoch)
    item_id: str | None = None  # a marketplace event's item
    formatted: list[bytes] = field(default_factory=list, compare=False)

    def message(self, cursor: str | None = None) -> bytes:
        """The SSE message; without ``cursor`` (the id is the sequence) formatted once, shared."""
        if cursor is not None:
            return sse.message(cursor, self.type, self.data)
        if not self.formatted:
            self.formatted.append(sse.message(str(self.sequence), self.type, self.data))
        return self.formatted[0]


@dataclass(eq=False)
class Subscriber:
    caller: Caller
    filter: EventFilter
    streams: tuple[str, ...]
    limit: int
    queue: asyncio.Queue[Item | None] = field(default_factory=asyncio.Queue)
    overflowed: bool = False

    def offer(self, item: Item) -> None:
        if self.overflowed:
            return
        if self.queue.qsize() >= self.limit:
            self.overflowed = True
            self.queue.put_nowait(None)
            return
        self.queue.put_nowait(item)

    def close(self) -> None:
        self.queue.put_nowait(None)


def _published(msg: Msg) -> float:
    try:
        return float(msg.metadata.timestamp.timestamp())
    except (AttributeError, nats.errors.Error):
        return time.time()


class Hub:
    def __init__(self, js: JetStreamContext, *, subscriber_limit: int = 10_000) -> None:
        self.js = js
        self.directory = JobDirectory()
        self.last: dict[str, int] = dict.fromkeys(STREAM_NAMES, 0)
        self.subscribers: set[Subscriber] = set()
        self.subscriber_limit = subscriber_limit
        self._subs: list[Subscription] = []

    async def start(self) -> None:
        for stream, name in STREAM_NAMES.items():
            self.last[stream] = int((await self.js.stream_info(name)).state.last_seq)
        await self._learn("pai.job.*.job.submitted", self.last["jobs"])
        await self._learn("pai.alert.*.alert.fired", self.last["alerts"])
        await self._learn(MARKETPLACE_SUBJECTS, self.last["marketplace"])
        for stream in STREAM_NAMES:
            self._subs.append(
                await subscribe_ordered(
                    self.js,
                    STREAM_SUBJECTS[stream],
                    cb=self._callback(stream),
                    config=ConsumerConfig(
                        deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=self.last[stream] + 1
                    ),
                )
            )
        log.info(
            "following the bus", jobs=len(self.directory), **{f"{k}_seq": v for k, v in self.last.items()}
        )

    async def stop(self) -> None:
        for sub in self._subs:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        self._subs.clear()
        for subscriber in list(self.subscribers):
            subscriber.close()

    async def _learn(self, subject: str, until: int) -> None:
        """Teach the directory from the events on ``subject`` up to sequence ``until``."""
        async for msg in self._read(subject, 1, until):
            with contextlib.suppress(ValueError):
                locate(orjson.loads(msg.data), self.directory, msg.metadata.sequence.stream)

    async def _read(self, subject: str, start: int, until: int) -> AsyncIterator[Msg]:
        """The stored messages on ``subject`` with sequences from ``start`` to ``until``."""
        if start > until:
            return
        sub = await self.js.subscribe(
            subject,
            ordered_consumer=True,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start),
        )
        try:
            info = await sub.consumer_info()
            delivered = info.delivered.stream_seq if info.delivered else 0
            if not info.num_pending and not delivered:
                return  # nothing stored at or after start on this subject
            while True:
                msg = await sub.next_msg(timeout=REPLAY_PATIENCE)
                sequence = msg.metadata.sequence.stream
                if sequence > until:
                    return
                yield msg
                if sequence >= until or not msg.metadata.num_pending:
                    return
        finally:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()

    def _item(self, stream: str, msg: Msg) -> Item | None:
        try:
            data = orjson.loads(msg.data)  # only its type and job are read; the bytes go out as they are
        except ValueError:
            log.warning("undecodable message skipped", subject=msg.subject)
            return None
        sequence = msg.metadata.sequence.stream
        located = locate(data, self.directory, sequence)
        return Item(
            stream, sequence, located.type, located.job_id, msg.data, _published(msg), located.item_id
        )

    def _callback(self, stream: str):  # type: ignore[no-untyped-def]
        async def on_message(msg: Msg) -> None:
            sequence = msg.metadata.sequence.stream
            if sequence <= self.last[stream]:
                return
            item = self._item(stream, msg)
            self.last[stream] = sequence
            if item is not None:
                self.dispatch(item)

        return on_message

    def dispatch(self, item: Item) -> None:
        job = self.directory.job(item.job_id)
        market = self.directory.item(item.item_id)
        for subscriber in self.subscribers:
            if item.stream in subscriber.streams and wanted(
                subscriber.caller, subscriber.filter, item.type, job, market
            ):
                subscriber.offer(item)

    def subscribe(self, caller: Caller, flt: EventFilter) -> tuple[Subscriber, dict[str, int]]:
        """Register a subscriber; it receives every event after the positions returned."""
        subscriber = Subscriber(caller, flt, flt.streams(), self.subscriber_limit)
        self.subscribers.add(subscriber)
        return subscriber, {stream: self.last[stream] for stream in subscriber.streams}

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self.subscribers.discard(subscriber)

    async def replay(
        self, subscriber: Subscriber, stream: str, after: int, until: int
    ) -> AsyncIterator[Item]:
        """What ``subscriber`` may see of ``stream`` after ``after`` up to ``until``."""
        subject = STREAM_SUBJECTS[stream]
        flt = subscriber.filter
        if stream == "jobs" and flt.job is not None:
            job_id = self.directory.job_id(*flt.job)
            if job_id is None:
                return  # no such job yet: nothing stored to replay
            subject = job_subject(job_id, ">")
        async for msg in self._read(subject, after + 1, until):
            item = self._item(stream, msg)
            if item is not None and wanted(
                subscriber.caller,
                flt,
                item.type,
                self.directory.job(item.job_id),
                self.directory.item(item.item_id),
            ):
                yield item
