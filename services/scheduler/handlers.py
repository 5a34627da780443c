"""The scheduler's handlers: the job and node streams into the core, its decisions out, and the
questions the leader answers (`RPCS`, from a request subject to the method answering it).

State is never stored apart from the stream: at start the service reads PAI_JOBS and
PAI_NODES from the beginning with ordered consumers, folding every event into the core
without deciding. Once both are caught up it decides, and from then on decides after each
batch of events. Its own announcements come back through the same stream and change nothing
twice, and their deterministic ids let the bus drop a decision repeated after a crash. Each
decision carries the leader's lease epoch (app.py raises the fence): a decision of an older
epoch stored after the fence is ignored, here and by the orchestrator (libs/protocol/fencing.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
from collections.abc import Awaitable, Callable, Mapping

import structlog
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js.api import DeliverPolicy
from pydantic import ValidationError

from libs.backbone.connecting import Bus, patiently
from libs.backbone.consuming import subscribe_ordered
from libs.backbone.errors import TemporaryError
from libs.backbone.topology import publish_event
from libs.protocol.events import JobCompleted, JobPending, JobPreempting, JobScheduled, decode_event
from libs.protocol.fencing import Fence, deposed
from libs.protocol.subjects import (
    JOB_SUBJECTS,
    JOBS_STREAM,
    NODE_SUBJECTS,
    NODES_STREAM,
    job_id_of,
    job_subject,
)
from services.scheduler.adapters.control import (
    CONFIG_SUBJECT,
    QUEUE_SUBJECT,
    RECONFIGURE_SUBJECT,
    VC_STATUS_SUBJECT,
    Control,
    answer_queue,
)
from services.scheduler.core.queueing import Announcement, SchedulerCore

log = structlog.get_logger(__name__)


# At most this many events are applied between two decisions.
MAX_BATCH = 256

DECISIONS = (JobScheduled, JobPending, JobPreempting, JobCompleted)


def _first_error(exc: ValidationError) -> str:
    """Where the first problem of an undecodable event is and what it is, in one line."""
    error = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in error["loc"][1:])  # [0] is the event's type
    return f"{where}: {error['msg']}" if where else error["msg"]


class SchedulerService:
    def __init__(
        self,
        bus: Bus,
        core: SchedulerCore,
        control: Control | None = None,
        *,
        epoch: int | None = None,
        fences: tuple[Fence, ...] = (),
    ) -> None:
        self.bus = bus
        self.core = core
        self.control = control
        # This leader's lease epoch, stamped on every decision, and the fences known at its start.
        self.epoch = epoch
        self.fences = fences
        self.ignored = 0  # decisions of deposed leaders met in the stream
        # Events and a reconfiguration never interleave: the swap sees a settled core.
        self.lock = control.lock if control is not None else asyncio.Lock()
        self._stop = asyncio.Event()
        self._inbox: asyncio.Queue[tuple[str, Msg]] = asyncio.Queue()
        self._catch_up: dict[str, int] = {}
        self._notes: list[str] = []

    async def run(self, stop: asyncio.Event) -> None:
        js = self.bus.js
        for stream in (JOBS_STREAM, NODES_STREAM):
            info = await patiently(functools.partial(js.stream_info, stream))
            if info.state.last_seq:
                self._catch_up[stream] = info.state.last_seq
        subs = [
            await subscribe_ordered(js, subject, deliver_policy=DeliverPolicy.ALL, cb=self._enqueue(stream))
            for subject, stream in ((NODE_SUBJECTS, NODES_STREAM), (JOB_SUBJECTS, JOBS_STREAM))
        ]
        self._stop = stop
        rpcs = [
            await self.bus.nc.subscribe(subject, queue="scheduler", cb=functools.partial(answer, self))
            for subject, answer in RPCS.items()
        ]
        if not self._catch_up:
            await self._decide(stop)
        try:
            while not stop.is_set():
                getter = asyncio.ensure_future(self._inbox.get())
                stopper = asyncio.ensure_future(stop.wait())
                done, _ = await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
                stopper.cancel()
                if getter not in done:
                    getter.cancel()
                    break
                # Everything that has arrived is applied before one decision: under a burst of
                # submissions the scheduler decides (and announces) per batch, not per message.
                batch = [getter.result()]
                while len(batch) < MAX_BATCH and not self._inbox.empty():
                    batch.append(self._inbox.get_nowait())
                async with self.lock:
                    for stream, msg in batch:
                        self._absorb(stream, msg)
                    if not self._catch_up:
                        await self._decide(stop)
        finally:
            for sub in [*subs, *rpcs]:
                with contextlib.suppress(NatsError):  # the connection closed first
                    await sub.unsubscribe()

    def _enqueue(self, stream: str) -> Callable[[Msg], Awaitable[None]]:
        async def callback(msg: Msg) -> None:
            await self._inbox.put((stream, msg))

        return callback

    def _absorb(self, stream: str, msg: Msg) -> None:
        try:
            event = decode_event(msg.data)
        except ValidationError as exc:
            log.warning(
                "ignoring a message that is not a known event", subject=msg.subject, error=str(exc)[:200]
            )
            event = None
            job_id = job_id_of(msg.subject)
            if job_id is not None and msg.subject == job_subject(job_id, "job.submitted"):
                self.core.refuse_unreadable(job_id, f"its submission cannot be read ({_first_error(exc)})")
        if isinstance(event, DECISIONS) and deposed(event.epoch, msg.metadata.sequence.stream, self.fences):
            self.ignored += 1
            log.warning(
                "ignoring a decision of a deposed scheduler leader",
                type=event.type,
                job_id=event.job_id,
                epoch=event.epoch,
                sequence=msg.metadata.sequence.stream,
            )
            event = None
        if event is not None:
            self.core.apply(event)
        target = self._catch_up.get(stream)
        if target is not None and msg.metadata.sequence.stream >= target:
            del self._catch_up[stream]
            log.info("caught up", stream=stream, sequence=target)

    def _tell_notes(self) -> None:
        """Say once what a node change did to the VCs an admin set (new GPUs to the default VC)."""
        policy = self.core.policy
        inner = getattr(policy, "inner", policy)
        notes = list(getattr(inner, "notes", []))
        if notes != self._notes:
            self._notes = notes
            for note in notes:
                log.warning("virtual clusters: " + note)

    async def _decide(self, stop: asyncio.Event) -> None:
        """Announce the core's decisions, all sent at once; any the bus refused are sent again."""
        waiting = [self._stamped(event) for event in self.core.decide()]
        self._tell_notes()
        delay = 0.2
        while waiting and not stop.is_set():
            sent = await asyncio.gather(
                *(publish_event(self.bus.js, event) for event in waiting), return_exceptions=True
            )
            failed = []
            for announcement, outcome in zip(waiting, sent, strict=True):
                if isinstance(outcome, TemporaryError):
                    failed.append(announcement)
                elif isinstance(outcome, BaseException):
                    raise outcome
                else:
                    log.info(announcement.type, job_id=announcement.job_id)
            waiting = failed
            if waiting:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
                delay = min(delay * 2, 5.0)

    def _stamped(self, event: Announcement) -> Announcement:
        """The decision with this leader's epoch, in its payload and its id: a new leader's
        decision is never dropped by the stream as a repeat of a fenced one's."""
        if self.epoch is None:
            return event
        return event.model_copy(update={"epoch": self.epoch, "event_id": f"{event.event_id}.e{self.epoch}"})

    async def _still_rebuilding(self, msg: Msg) -> bool:
        """Until the replay is done the running jobs are not all known: an answer would lie."""
        if not self._catch_up:
            return False
        message = "the scheduler is still rebuilding its state from the job stream; retry in a moment"
        await msg.respond(json.dumps({"error": "unavailable", "message": message}).encode())
        return True

    async def answer_reconfigure(self, msg: Msg) -> None:
        if self.control is None:
            await msg.respond(json.dumps({"error": "unavailable", "message": "not reconfigurable"}).encode())
            return
        if await self._still_rebuilding(msg):
            return
        if await self.control.answer_reconfigure(msg):
            async with self.lock:
                await self._decide(self._stop)  # waiting jobs may fit the new cells

    async def answer_config(self, msg: Msg) -> None:
        if self.control is None:
            await msg.respond(json.dumps({"error": "unavailable", "message": "not reconfigurable"}).encode())
            return
        if await self._still_rebuilding(msg):
            return
        await self.control.answer_config(msg)

    async def answer_queue(self, msg: Msg) -> None:
        if await self._still_rebuilding(msg):
            return
        await answer_queue(self.core, msg)

    async def answer_status(self, msg: Msg) -> None:
        # A status read during the replay would show jobs that run as not running (0 GPUs used).
        if await self._still_rebuilding(msg):
            return
        if self.control is not None:
            await self.control.answer_status(msg)
            return
        status = [dataclasses.asdict(vc) for vc in self.core.policy.virtual_clusters()]
        await msg.respond(json.dumps(status).encode())


# The questions the leader answers over request/reply (queue group `scheduler`), and the method
# answering each. The events themselves are all folded into the core (`SchedulerCore.apply`).
RPCS: Mapping[str, Callable[[SchedulerService, Msg], Awaitable[None]]] = {
    VC_STATUS_SUBJECT: SchedulerService.answer_status,
    RECONFIGURE_SUBJECT: SchedulerService.answer_reconfigure,
    CONFIG_SUBJECT: SchedulerService.answer_config,
    QUEUE_SUBJECT: SchedulerService.answer_queue,
}
