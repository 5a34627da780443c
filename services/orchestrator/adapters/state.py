"""Framework state per job in the JetStream KV bucket PAI_FRAMEWORKS, written with revision checks.

A write names the revision it read; a concurrent writer (another replica, or this one racing
itself after a redelivery) makes it fail with KVConflictError, and the handler reads and
decides again. The state outlives the orchestrator process, which is what a restart recovers
from. Secrets are read from PAI_SECRETS (one sealed JSON mapping per job id) and never written here.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

import structlog
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError, NotFoundError

from libs.backbone.errors import KVConflictError
from libs.backbone.kv import UNANSWERED, ModelStore, Versioned
from libs.backbone.sealing import SecretsCipher
from libs.backbone.topology import FRAMEWORKS, SECRETS
from libs.protocol.events import JobSubmitted, decode_event
from libs.protocol.subjects import JOBS_STREAM, job_subject
from services.orchestrator.core.frameworks import Framework

log = structlog.get_logger(__name__)

# How often the secrets of a task being started are asked for again while the bus is away.
_RETRY_FIRST = 0.2
_RETRY_MAX = 5.0


class FrameworkStore:
    """Each job's framework in KV, with the last version this process read or wrote kept in memory.

    The orchestrator is the bucket's only writer (one instance, replaced never alongside another),
    so what it wrote last is what KV holds, and a decision can start from memory instead of a KV
    read. Every write still names the revision it builds on: should anything else have written,
    the write fails with KVConflictError, the remembered version is forgotten, and the caller
    reads KV again. Memory holds at most `remember` unfinished jobs, the least recently used
    leaving first; a finished job leaves it with its last write.
    """

    def __init__(self, store: ModelStore[Framework], *, remember: int = 4096) -> None:
        self._store = store
        self._remember = remember
        self._known: OrderedDict[str, Versioned[Framework]] = OrderedDict()

    @classmethod
    async def open(cls, js: JetStreamContext) -> FrameworkStore:
        return cls(await ModelStore.open(js, FRAMEWORKS.bucket, Framework))

    def _keep(self, job_id: str, current: Versioned[Framework]) -> None:
        self._known[job_id] = current
        self._known.move_to_end(job_id)
        while len(self._known) > self._remember:
            self._known.popitem(last=False)

    async def get(self, job_id: str, *, new: bool = False) -> Versioned[Framework] | None:
        """The job's framework and its revision, or None when there is none.

        `new=True` says the caller expects the job to be unknown (it is being submitted): nothing
        is read, and should the job exist after all, creating it fails with KVConflictError.
        """
        known = self._known.get(job_id)
        if known is not None:
            self._known.move_to_end(job_id)
            return known
        if new:
            return None
        current = await self._store.get(job_id)
        if current is not None:
            self._keep(job_id, current)
        return current

    async def save(self, job_id: str, framework: Framework, revision: int | None) -> int:
        """Write `framework` if the key is still at `revision` (None: only if absent).

        Returns once the write is known to be stored, waiting out a bus that is away: what the
        caller then carries out is what KV holds. KVConflictError when another write came first.
        """
        try:
            # Settled: an unanswered write is read back, never taken for lost (libs/backbone/kv.py).
            written = await self._store.write(job_id, framework, revision)
        except KVConflictError:
            self._known.pop(job_id, None)
            raise
        if framework.outcome is not None and not framework.outbox:
            self._known.pop(job_id, None)  # a finished job is not decided on again: no memory spent
        else:
            self._keep(job_id, Versioned(framework, written))
        return written

    def forget(self, job_id: str) -> None:
        """Drop the remembered version: the next `get` reads KV."""
        self._known.pop(job_id, None)

    async def job_ids(self) -> list[str]:
        return await self._store.keys()


class SubmissionReader:
    """A job's `job.submitted` event, read straight from the job stream by its subject."""

    def __init__(self, js: JetStreamContext) -> None:
        self._js = js

    async def __call__(self, job_id: str) -> JobSubmitted | None:
        try:
            msg = await self._js.get_last_msg(JOBS_STREAM, job_subject(job_id, "job.submitted"), direct=True)
        except NotFoundError:
            return None  # never submitted, or the stream's limits have dropped it
        event = decode_event(msg.data or b"")
        return event if isinstance(event, JobSubmitted) else None


class SecretsReader:
    """The job's secrets as a mapping, opened from their sealed value in KV for the task's 0600 file.

    A task cannot start without its secrets, and a bus that is away is no fault of the task: a
    read that goes unanswered is tried again (0.2 s doubling to 5 s) until the bus answers, so a
    start during an outage waits for the bus instead of failing the task (and with it the job).
    """

    def __init__(self, js: JetStreamContext, cipher: SecretsCipher) -> None:
        self._js = js
        self._cipher = cipher

    async def __call__(self, job_id: str) -> dict[str, Any] | None:
        pause = _RETRY_FIRST
        while True:
            try:
                return await self._read(job_id)
            except UNANSWERED as exc:
                log.warning(
                    "job secrets unreadable while the bus is away; retrying", job_id=job_id, error=repr(exc)
                )
            await asyncio.sleep(pause)  # the bus is away: a timer, not a wait for an event
            pause = min(pause * 2, _RETRY_MAX)

    async def _read(self, job_id: str) -> dict[str, Any] | None:
        kv = await self._js.key_value(SECRETS.bucket)
        try:
            entry = await kv.get(job_id)
        except KeyNotFoundError:
            return None
        if not entry.value:
            return None
        return self._cipher.open(entry.value)
