"""Framework state per job in the JetStream KV bucket PAI_FRAMEWORKS, written with revision checks.

A job is several values, so that what one decision writes is what it changed, not the job:
- `<job id>`: the job's own value (`StoredJob`): everything but its tasks (attempts, retries,
  outcome, the events not yet confirmed published), how many tasks each attempt has, and the
  tasks the last decision changed. It is the commit point: every decision writes it once, naming
  the revision it read, so a concurrent writer (another replica, or this one racing itself after
  a redelivery) makes the write fail with KVConflictError, and the handler reads and decides again.
- `<job id>.t.<attempt>.<position>`: one task (`TaskRecord`) with all its task attempts, copied
  from the job's value once that is written. What a task's value says is superseded by the
  job's value while the job's value still carries that task.
- `<job id>.d.<token>.<n>`: when a decision changes more than fits comfortably in one value (the
  ten thousand tasks a placement creates, their task.started events), its changes are written
  first in pieces under a token of its own, and the job's value names the token. Pieces nobody
  names (the decision lost its race, or the process died before naming them) are never read.

So a crash at any instant leaves either the old job value (and nothing of the decision is read)
or the new one (and all of it is); one task event writes the job's value (a few kB, the same for
ten tasks or ten thousand) and its task's. The state outlives the orchestrator process, which is
what a restart recovers from. Secrets are read from PAI_SECRETS (one sealed JSON mapping per job
id) and never written here.
"""

from __future__ import annotations

import asyncio
import json
import operator
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import compress
from typing import Any

import nats.errors
import structlog
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError, NotFoundError
from nats.js.kv import KeyValue
from pydantic import BaseModel, ConfigDict, Field

from libs.backbone.errors import TRANSIENT_ERRORS, KVConflictError
from libs.backbone.kv import UNANSWERED, ModelStore, Versioned, current_entries
from libs.backbone.sealing import SecretsCipher
from libs.backbone.topology import FRAMEWORKS, SECRETS
from libs.protocol.events import JobSubmitted, decode_event
from libs.protocol.subjects import JOBS_STREAM, job_subject
from services.orchestrator.core.frameworks import Framework, JobAttempt, Task

log = structlog.get_logger(__name__)

INLINE_TASKS = 64
"""A value carries up to this many tasks and as many events; more are staged in pieces."""
PIECE_BYTES = 256 * 1024
"""The largest staged piece: far below the bus's message limit (8 MB here, 1 MB by default)."""
CONCURRENT_WRITES = 256
"""Task values written at once (each still checked against its revision)."""
CARRIED_TASKS = 8
"""Tasks the job's value carries before they are copied to their own values: a task event then
writes one value (the job's, with at most this many tasks) and, one time in this many, the
carried tasks' own values together, instead of two values one after the other each time."""


class TaskRecord(BaseModel):
    """One task of one job attempt, at its position in the attempt's tasks."""

    model_config = ConfigDict(extra="forbid")

    attempt: int
    position: int
    task: Task
    rev: int = 0
    """The revision of the job value that decided this version (0 inside that value itself)."""


class Staged(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: str
    pieces: int


class Changes(BaseModel):
    """A staged piece: some of a decision's tasks and events."""

    model_config = ConfigDict(extra="forbid")

    tasks: list[TaskRecord] = Field(default_factory=list)
    outbox: list[dict[str, Any]] = Field(default_factory=list)


class StoredJob(Framework):
    """The job's own value: the framework without its tasks, plus the last decision's tasks."""

    task_counts: list[int] | None = None
    """Tasks per attempt, in the order of `attempts`; None: a value written before tasks had
    values of their own, which holds them inline."""
    changes: list[TaskRecord] = Field(default_factory=list)
    staged: Staged | None = None


def task_key(job_id: str, attempt: int, position: int) -> str:
    return f"{job_id}.t.{attempt}.{position}"


def piece_key(job_id: str, token: str, piece: int) -> str:
    return f"{job_id}.d.{token}.{piece}"


@dataclass
class _Kept:
    current: Versioned[Framework]
    complete: bool
    """False when the tasks were read from a value that held them inline: all are written next."""
    staged: str | None = None
    revisions: dict[tuple[int, int], int] = field(default_factory=dict)
    """The KV revision of each task value this process read or wrote."""
    carried: dict[tuple[int, int], TaskRecord] = field(default_factory=dict)
    """Tasks the job's value holds that their own values do not have yet."""


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

    Decisions copy only the tasks they edit (services/orchestrator/core/frameworks.py), so the
    tasks a write must carry are those that are not the very objects of the version it builds on.
    """

    def __init__(self, store: ModelStore[StoredJob], *, remember: int = 4096) -> None:
        self._store = store
        self._kv: KeyValue = store._kv
        self._remember = remember
        self._known: OrderedDict[str, _Kept] = OrderedDict()

    @classmethod
    async def open(cls, js: JetStreamContext) -> FrameworkStore:
        return cls(await ModelStore.open(js, FRAMEWORKS.bucket, StoredJob))

    def _keep(self, job_id: str, kept: _Kept) -> None:
        self._known[job_id] = kept
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
            return known.current
        if new:
            return None
        stored = await self._store.get(job_id)
        if stored is None:
            return None
        kept = await self._assemble(job_id, stored.value, stored.revision)
        self._keep(job_id, kept)
        return kept.current

    async def settled(self, job_id: str) -> bool:
        """Whether the job is over with nothing left to publish, read from its own value alone
        (a restart need not read the tasks of every job that ever ran)."""
        known = self._known.get(job_id)
        if known is not None:
            return known.current.value.outcome is not None and not known.current.value.outbox
        stored = await self._store.get(job_id)
        if stored is None:
            return True
        job = stored.value
        return job.outcome is not None and not job.outbox and job.staged is None

    async def _assemble(self, job_id: str, stored: StoredJob, revision: int) -> _Kept:
        if stored.task_counts is None:  # tasks inline: a value of the former layout
            framework = _framework(stored, [attempt.tasks for attempt in stored.attempts])
            for attempt in framework.attempts:
                attempt.recount()
            return _Kept(Versioned(framework, revision), complete=False)
        revisions: dict[tuple[int, int], int] = {}
        found: dict[tuple[int, int], TaskRecord] = {}
        if any(stored.task_counts):
            for _key, value, kv_revision in await self._read(f"{job_id}.t.>"):
                record = TaskRecord.model_validate_json(value)
                found[(record.attempt, record.position)] = record
                revisions[(record.attempt, record.position)] = kv_revision
        changes, outbox = await self._changes(job_id, stored)
        for record in changes:
            found[(record.attempt, record.position)] = record
        # A watch may end before it delivered every value (its "nothing pending" can come first):
        # what it did not bring is read key by key.
        missing = [
            (attempt.attempt, position)
            for attempt, count in zip(stored.attempts, stored.task_counts, strict=True)
            for position in range(count)
            if (attempt.attempt, position) not in found
        ]
        for start in range(0, len(missing), CONCURRENT_WRITES):
            batch = missing[start : start + CONCURRENT_WRITES]
            for where, entry in zip(
                batch, await asyncio.gather(*(self._get(task_key(job_id, *w)) for w in batch)), strict=True
            ):
                if entry is not None:
                    found[where] = TaskRecord.model_validate_json(entry[0])
                    revisions[where] = entry[1]
        tasks: list[list[Task]] = []
        for attempt, count in zip(stored.attempts, stored.task_counts, strict=True):
            try:
                tasks.append([found[(attempt.attempt, position)].task for position in range(count)])
            except KeyError as exc:
                raise RuntimeError(
                    f"the stored state of job {job_id} lacks task {exc.args[0]} of its "
                    f"{count} in attempt {attempt.attempt}: KV bucket {FRAMEWORKS.bucket} was "
                    "edited or lost values; remove the job's keys to let it be rebuilt"
                ) from None
        framework = _framework(stored, tasks, outbox)
        kept = _Kept(Versioned(framework, revision), complete=True, revisions=revisions)
        kept.staged = stored.staged.token if stored.staged is not None else None
        kept.carried = {(r.attempt, r.position): r for r in changes}
        return kept

    async def _changes(self, job_id: str, stored: StoredJob) -> tuple[list[TaskRecord], list[dict[str, Any]]]:
        if stored.staged is None:
            return list(stored.changes), list(stored.outbox)
        tasks: list[TaskRecord] = []
        outbox: list[dict[str, Any]] = []
        for piece in range(stored.staged.pieces):
            entry = await self._kv.get(piece_key(job_id, stored.staged.token, piece))
            changes = Changes.model_validate_json(entry.value or b"{}")
            tasks.extend(changes.tasks)
            outbox.extend(changes.outbox)
        return tasks, outbox

    async def _get(self, key: str) -> tuple[bytes, int] | None:
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError:
            return None
        return (entry.value, entry.revision or 0) if entry.value else None

    async def _read(self, pattern: str) -> list[tuple[str, bytes, int]]:
        """Every live value whose key matches `pattern`, with its revision."""
        found = await current_entries(self._kv, pattern)
        return [(key, entry.value, entry.revision or 0) for key, entry in found.items()]

    async def save(
        self,
        job_id: str,
        framework: Framework,
        revision: int | None,
        *,
        touched: Iterable[tuple[int, int]] | None = None,
    ) -> int:
        """Write `framework` if the job's value is still at `revision` (None: only if absent).

        `touched` names the (job attempt, position) of every task that may differ from the
        version at `revision` (a decision knows which it copied); without it they are found by
        comparing each task with the remembered version's.
        """
        kept = self._known.get(job_id)
        carried: dict[tuple[int, int], TaskRecord] = {}
        if kept is not None and kept.complete and revision is not None and kept.current.revision == revision:
            if touched is None:
                changed = list(_changed(kept.current.value, framework))
            else:
                changed = _touched(framework, touched)
            carried = dict(kept.carried)
            revisions = kept.revisions
        else:
            changed = [
                (attempt.attempt, position, task)
                for attempt in framework.attempts
                for position, task in enumerate(attempt.tasks)
            ]
            revisions = kept.revisions if kept is not None else {}
        finished = framework.outcome is not None and not framework.outbox
        few = len(changed) <= INLINE_TASKS
        if carried and few and (finished or len(carried) + len(changed) > CARRIED_TASKS):
            # What the job's value carries is decided already (it is in the value at `revision`):
            # copied to the tasks' own values now, the new value can leave it out. A decision
            # that changes many tasks (a placement, its launches) skips this, so tasks that are
            # about to change again are not written one by one in between; a group of a job's
            # events (at most INLINE_TASKS of them: its completions) does not, or what the value
            # carries would grow with every group.
            assert revision is not None
            await self._write_tasks(job_id, list(carried.values()), revision, revisions)
            carried = {}
        for attempt_no, position, task in changed:
            carried[(attempt_no, position)] = TaskRecord(attempt=attempt_no, position=position, task=task)
        records = list(carried.values())
        stored = StoredJob.model_construct(
            **{
                **dict(framework),
                "attempts": [attempt.model_copy(update={"tasks": []}) for attempt in framework.attempts],
                "task_counts": [len(attempt.tasks) for attempt in framework.attempts],
                # Given, not defaulted: pydantic inspects a default factory's signature on every
                # construction (0.17 ms for `list`, a third of a 10,000-task job's launch time).
                "changes": [],
                "staged": None,
            }
        )
        token = None
        if len(records) <= INLINE_TASKS and len(framework.outbox) <= INLINE_TASKS:
            stored.changes = records
        else:
            token = uuid.uuid4().hex
            pieces = await self._stage(job_id, token, records, framework.outbox)
            stored.staged = Staged(token=token, pieces=pieces)
            stored.outbox = []
        try:
            # Settled: an unanswered write is read back, never taken for lost (libs/backbone/kv.py),
            # so what the caller then carries out is what KV holds.
            written = await self._store.write(job_id, stored, revision)
        except KVConflictError:
            self._known.pop(job_id, None)
            if token is not None:
                await self._drop(job_id, token)
            raise
        if kept is not None and kept.staged is not None and kept.staged != token:
            await self._drop(job_id, kept.staged)  # no longer named by the job's value
        if finished:
            self._known.pop(job_id, None)  # a finished job is not decided on again: no memory spent
        else:
            self._keep(job_id, _Kept(Versioned(framework, written), True, token, revisions, carried))
        return written

    async def _stage(
        self, job_id: str, token: str, records: list[TaskRecord], outbox: list[dict[str, Any]]
    ) -> int:
        pieces: list[bytes] = []
        tasks: list[str] = []
        events: list[str] = []
        size = 0

        def cut() -> None:
            nonlocal size
            pieces.append(f'{{"tasks":[{",".join(tasks)}],"outbox":[{",".join(events)}]}}'.encode())
            tasks.clear()
            events.clear()
            size = 0

        for record in records:
            text = record.model_dump_json()
            if size + len(text) > PIECE_BYTES and size:
                cut()
            tasks.append(text)
            size += len(text) + 1
        for event in outbox:
            text = json.dumps(event, separators=(",", ":"))
            if size + len(text) > PIECE_BYTES and size:
                cut()
            events.append(text)
            size += len(text) + 1
        if size or not pieces:
            cut()
        for start in range(0, len(pieces), 8):
            await asyncio.gather(
                *(
                    self._kv.put(piece_key(job_id, token, start + n), piece)
                    for n, piece in enumerate(pieces[start : start + 8])
                )
            )
        return len(pieces)

    async def _drop(self, job_id: str, token: str) -> None:
        """Remove staged pieces no job value names (best effort: unnamed pieces are never read)."""
        try:
            for key, _value, _revision in await self._read(f"{job_id}.d.{token}.*"):
                await self._kv.purge(key)
        except TRANSIENT_ERRORS as exc:  # a leftover piece is harmless: nothing names it
            log.debug("staged pieces left in place", job_id=job_id, token=token, error=str(exc))

    async def _write_tasks(
        self, job_id: str, records: list[TaskRecord], revision: int, revisions: dict[tuple[int, int], int]
    ) -> None:
        for start in range(0, len(records), CONCURRENT_WRITES):
            batch = records[start : start + CONCURRENT_WRITES]
            await asyncio.gather(*(self._write_task(job_id, r, revision, revisions) for r in batch))

    async def _write_task(
        self, job_id: str, record: TaskRecord, revision: int, revisions: dict[tuple[int, int], int]
    ) -> None:
        """Copy one task to its own value, unless a later decision's version is there already."""
        where = (record.attempt, record.position)
        key = task_key(job_id, *where)
        data = record.model_copy(update={"rev": revision}).model_dump_json().encode()
        last = revisions.get(where)
        while True:
            try:
                if last is None:
                    revisions[where] = await self._kv.create(key, data)
                else:
                    revisions[where] = await self._kv.update(key, data, last=last)
                return
            except KeyWrongLastSequenceError:
                try:
                    entry = await self._kv.get(key)
                except KeyNotFoundError:
                    last = None
                    continue
                theirs = TaskRecord.model_validate_json(entry.value or b"{}")
                if theirs.rev >= revision:
                    revisions[where] = entry.revision or 0
                    return
                last = entry.revision

    def forget(self, job_id: str) -> None:
        """Drop the remembered version: the next `get` reads KV."""
        self._known.pop(job_id, None)

    async def job_ids(self) -> list[str]:
        """Every job with a value in the bucket.

        A watch's listing can come back short (its "nothing pending" can come first, and on a bus
        that has just restarted a value can be dropped while the watch is set up), and a job left
        out of a restart's recovery would never finish: the stream's own list of the bucket's
        subjects is read too, and a job named by either is in. A listed key whose value has since
        been deleted reads as absent, which every caller allows for.
        """
        listed = [key for key, _value, _revision in await self._read("*")]
        seen = set(listed)
        for key in await self._subjects("*"):
            if key not in seen:
                seen.add(key)
                listed.append(key)
        return listed

    async def _subjects(self, pattern: str, attempts: int = 5) -> list[str]:
        """The keys matching `pattern` that the bucket's stream holds messages for."""
        prefix = self._kv._pre
        for attempt in range(attempts):
            try:
                info = await self._kv._js.stream_info(self._kv._stream, subjects_filter=f"{prefix}{pattern}")
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                if attempt == attempts - 1:
                    raise
                await asyncio.sleep(0.5)
                continue
            return [subject[len(prefix) :] for subject in (info.state.subjects or {})]
        return []


def _framework(
    stored: StoredJob, tasks: Iterable[list[Task]], outbox: list[dict[str, Any]] | None = None
) -> Framework:
    """The framework a stored job value describes, given each attempt's tasks."""
    values = {name: getattr(stored, name) for name in Framework.model_fields}
    values["attempts"] = [
        attempt.model_copy(update={"tasks": list(these)})
        for attempt, these in zip(stored.attempts, list(tasks) or [[] for _ in stored.attempts], strict=True)
    ]
    if outbox is not None:
        values["outbox"] = outbox
    return Framework.model_construct(**values)


def _touched(framework: Framework, touched: Iterable[tuple[int, int]]) -> list[tuple[int, int, Task]]:
    attempts = {attempt.attempt: attempt for attempt in framework.attempts}
    changed = []
    for attempt_no, position in sorted(set(touched)):
        attempt = attempts.get(attempt_no)
        if attempt is not None and position < len(attempt.tasks):
            changed.append((attempt_no, position, attempt.tasks[position]))
    return changed


def _changed(before: Framework, after: Framework) -> Iterable[tuple[int, int, Task]]:
    """The tasks of `after` that are not the very objects `before` holds at their place."""
    old = {attempt.attempt: attempt for attempt in before.attempts}
    for attempt in after.attempts:
        previous: JobAttempt | None = old.get(attempt.attempt)
        shared = previous.tasks if previous is not None else []
        differs = map(operator.is_not, attempt.tasks, shared)
        for position in compress(range(len(attempt.tasks)), differs):
            yield attempt.attempt, position, attempt.tasks[position]
        for position in range(len(shared), len(attempt.tasks)):
            yield attempt.attempt, position, attempt.tasks[position]


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
