"""Writes job lifecycle events into the SQL read model, once each.

Every event is written in the same transaction as the record of its id in ``applied_events``:
a redelivered or duplicated event finds its id there and changes nothing, and a crash between
the two cannot happen because they commit together. ``write_events`` writes a batch in one
transaction (one commit, one look-up of applied ids, one read of the jobs' rows), which is how
the projection keeps up with bursts; events of one job are given in stream order. What each type
of event writes is one rule below (``job_pending``, ``task_started``, ...); which rule an event
gets is the table of services/rest/handlers.py, given as ``rules``. A decision of a deposed
scheduler leader (services/rest/handlers.py reads the fences) is given as ``ignored``: its id is
recorded, nothing else changes.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BigInteger, Table, and_, bindparam, case, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from libs.protocol.events import (
    EventBase,
    JobCompleted,
    JobPending,
    JobPreempting,
    JobRetrying,
    JobScheduled,
    JobStopRequested,
    JobSubmitted,
    JobTagged,
    TaskAttemptKey,
    TaskCompleted,
    TaskEvent,
    TaskStarted,
    task_attempt_key,
    task_event_runs,
)
from services.rest.adapters.tables import applied_events, job_attempts, jobs, task_attempts
from services.rest.adapters.tagging import change_tag_in
from services.rest.core import states
from services.rest.core.totals import job_row_from_config

# The columns the events' rules read: the config and other JSON columns are never decoded here.
_JOB_COLUMNS = (
    jobs.c.id,
    jobs.c.state,
    jobs.c.sub_state,
    jobs.c.created_time,
    jobs.c.launched_time,
    jobs.c.retries,
    jobs.c.retries_user,
    jobs.c.retries_platform,
    jobs.c.retries_resource,
)
# Bound parameters per IN list, well under SQLite's and PostgreSQL's limits.
_CHUNK = 500

# The statements every batch runs, built once: building a statement and its cache key each time
# cost more than SQLite's work for it.
_SEEN = select(applied_events.c.event_id).where(
    applied_events.c.event_id.in_(bindparam("ids", expanding=True))
)
_RECORD_APPLIED = insert(applied_events)
_READ_JOBS = select(*_JOB_COLUMNS).where(jobs.c.id.in_(bindparam("ids", expanding=True)))
_READ_JOB = select(*_JOB_COLUMNS).where(jobs.c.id == bindparam("k_id"))
_RAISE_REVISION = (
    update(jobs)
    .where(jobs.c.id == bindparam("k_id"))
    .values(tasks_revision=jobs.c.tasks_revision + 1)
    .returning(jobs.c.tasks_revision)
)
_ATTEMPT_KEY = and_(
    job_attempts.c.job_id == bindparam("k_job_id"), job_attempts.c.attempt == bindparam("k_attempt")
)
_START_ATTEMPT = (
    update(job_attempts)
    .where(_ATTEMPT_KEY)
    .values(
        state="RUNNING",
        sub_state=states.SUB_STATE_RUNNING,
        launched_time=func.coalesce(job_attempts.c.launched_time, bindparam("at", type_=BigInteger)),
    )
)
_PLACED = select(task_attempts.c.role, task_attempts.c.task_index).where(
    task_attempts.c.job_id == bindparam("k_job_id"),
    task_attempts.c.job_attempt == bindparam("k_attempt"),
    task_attempts.c.task_attempt == 0,
)
# An ended job's running time over all its attempts, for usage reports (adapters/usage.py).
_RECORD_RUN = (
    update(jobs)
    .where(jobs.c.id == bindparam("k_id"))
    .values(
        run_ms=select(
            func.coalesce(func.sum(job_attempts.c.completed_time - job_attempts.c.launched_time), 0)
        )
        .where(
            job_attempts.c.job_id == bindparam("k_id"),
            job_attempts.c.launched_time.is_not(None),
            job_attempts.c.completed_time.is_not(None),
        )
        .scalar_subquery()
    )
)
_INSERT_TASKS = insert(task_attempts)
_INSERT_ATTEMPT = insert(job_attempts)
_STOP_TASKS = (
    update(task_attempts)
    .where(
        task_attempts.c.job_id == bindparam("k_job_id"),
        task_attempts.c.job_attempt == bindparam("k_attempt"),
        task_attempts.c.state.in_(("WAITING", "RUNNING")),
    )
    .values(state=bindparam("v_state"), completed_time=bindparam("v_at"), revision=bindparam("v_revision"))
)


def _job_id(event: EventBase) -> str | None:
    job_id: str | None = getattr(event, "job_id", None)
    return job_id


def _chunks(values: Sequence[str]) -> list[Sequence[str]]:
    return [values[start : start + _CHUNK] for start in range(0, len(values), _CHUNK)]


class _JobRows:
    """The batch's job rows, read in one query and kept as the batch's own updates change them."""

    def __init__(self, rows: dict[str, dict[str, Any] | None]) -> None:
        self._rows = rows
        self._revisions: dict[str, int] = {}
        self._writes: dict[str, dict[str, Any]] = {}

    @classmethod
    async def read(cls, conn: AsyncConnection, job_ids: Sequence[str]) -> _JobRows:
        rows: dict[str, dict[str, Any] | None] = dict.fromkeys(job_ids)
        for chunk in _chunks(job_ids):
            result = await conn.execute(_READ_JOBS, {"ids": list(chunk)})
            rows.update((row["id"], dict(row)) for row in result.mappings())
        return cls(rows)

    async def get(self, conn: AsyncConnection, job_id: str) -> dict[str, Any] | None:
        cached = self._rows.get(job_id)
        if cached is not None:
            return cached
        # Not read yet, or absent when read (an event of this batch may have created it since).
        row = (await conn.execute(_READ_JOB, {"k_id": job_id})).mappings().first()
        self._rows[job_id] = dict(row) if row is not None else None
        return self._rows[job_id]

    async def revision(self, conn: AsyncConnection, job_id: str) -> int:
        """The revision this transaction stamps on the job's task rows it writes: the job's
        tasks_revision raised by one, the first time the transaction asks (see tables.py)."""
        revision = self._revisions.get(job_id)
        if revision is None:
            raised = await conn.execute(_RAISE_REVISION, {"k_id": job_id})
            revision = self._revisions[job_id] = int(raised.scalar_one_or_none() or 0)
        return revision

    def update(self, job_id: str, **values: Any) -> None:
        """Change the job's row: at once in the batch's copy, in the table by ``write`` (the
        batch's changes of a job written in one statement, jobs changing the same columns in one
        executemany: a burst of job.pending is one statement, not one per job)."""
        self._writes.setdefault(job_id, {}).update(values)
        cached = self._rows.get(job_id)
        if cached is not None:
            cached.update((column, value) for column, value in values.items() if column in cached)

    async def write(self, conn: AsyncConnection) -> None:
        """Write the changes ``update`` kept, before the transaction commits."""
        by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for job_id, values in self._writes.items():
            columns = tuple(sorted(values))
            by_columns.setdefault(columns, []).append(
                {"k_id": job_id, **{f"v_{column}": values[column] for column in columns}}
            )
        self._writes.clear()
        for columns, parameters in by_columns.items():
            await conn.execute(_prepared_update(jobs, "job", columns), parameters)


async def write_events(
    engine: AsyncEngine,
    events: Sequence[EventBase],
    rules: Rules,
    *,
    ignored: Collection[str] = frozenset(),
) -> list[bool]:
    """Write events in one transaction, in the order given, each by the rule ``rules`` name for its
    type; per event, False when applied before.

    All or nothing: if one event fails, the transaction rolls back and the caller may retry the
    events one by one. An event id given twice is applied once. An event whose id is in
    ``ignored`` is recorded as applied but changes nothing else (False), so a redelivery of it
    changes nothing either.
    """
    if not events:
        return []
    async with engine.begin() as conn:
        ids = list(dict.fromkeys(event.event_id for event in events))
        seen: set[str] = set()
        for chunk in _chunks(ids):
            seen.update(await conn.scalars(_SEEN, {"ids": list(chunk)}))
        results: list[bool] = []
        fresh: list[EventBase] = []
        recorded: list[EventBase] = []
        for event in events:
            new = event.event_id not in seen
            results.append(new and event.event_id not in ignored)
            if new:
                seen.add(event.event_id)
                recorded.append(event)
                if event.event_id not in ignored:
                    fresh.append(event)
        if recorded:
            now = int(time.time() * 1000)
            await conn.execute(
                _RECORD_APPLIED,
                [{"event_id": e.event_id, "job_id": _job_id(e), "applied_at": now} for e in recorded],
            )
        if fresh:
            job_ids = list(dict.fromkeys(job_id for e in fresh if (job_id := _job_id(e)) is not None))
            rows = await _JobRows.read(conn, job_ids)
            for run in task_event_runs(fresh):
                if len(run) > 1:
                    await _apply_task_run(conn, run, rows, rules)  # type: ignore[arg-type]
                else:
                    await _apply(conn, run[0], rows, rules)
            await rows.write(conn)
    return results


async def _existing_tasks(
    conn: AsyncConnection, job_id: str, run: Sequence[TaskEvent]
) -> set[TaskAttemptKey]:
    """Which of the run's task attempts have a row (read by index, filtered here)."""
    wanted = {task_attempt_key(event) for event in run}
    indexes = sorted({event.index for event in run})
    found: set[TaskAttemptKey] = set()
    for start in range(0, len(indexes), _CHUNK):
        result = await conn.execute(
            select(
                task_attempts.c.job_attempt,
                task_attempts.c.role,
                task_attempts.c.task_index,
                task_attempts.c.task_attempt,
            ).where(
                task_attempts.c.job_id == job_id,
                task_attempts.c.job_attempt.in_(sorted({event.attempt for event in run})),
                task_attempts.c.task_index.in_(indexes[start : start + _CHUNK]),
            )
        )
        found.update(key for key in ((job_id, a, r, i, t) for a, r, i, t in result) if key in wanted)
    return found


_KEY_PARAMS = {  # in the order of task_attempt_key
    "job_id": "k_job_id",
    "job_attempt": "k_attempt",
    "role": "k_role",
    "task_index": "k_index",
    "task_attempt": "k_task_attempt",
}
_UPDATES: dict[tuple[str, tuple[str, ...]], Any] = {}


def _prepared_update(table: Table, kind: str, columns: tuple[str, ...]) -> Any:
    """An UPDATE of one row of ``table`` by its key, each column's value bound as ``v_<column>``
    (one statement for executemany); built once per kind and set of columns. Kinds: ``job``
    (key ``k_id``), ``attempt`` (``k_job_id``, ``k_attempt``), and a run's ``started`` or
    ``completed`` for task attempts (the parameters of ``_KEY_PARAMS``, and ``v_revision``)."""
    statement = _UPDATES.get((kind, columns))
    if statement is None:
        values: dict[str, Any] = {
            column: bindparam(f"v_{column}", type_=table.c[column].type) for column in columns
        }
        if kind == "job":
            key: Any = jobs.c.id == bindparam("k_id")
        elif kind == "attempt":
            key = _ATTEMPT_KEY
        else:
            key = and_(*(task_attempts.c[column] == bindparam(name) for column, name in _KEY_PARAMS.items()))
            values["revision"] = bindparam("v_revision")
        if kind == "started":  # a task reported ended before it was reported started keeps its end
            values["state"] = case(
                (task_attempts.c.completed_time.is_(None), "RUNNING"), else_=task_attempts.c.state
            )
        statement = _UPDATES[(kind, columns)] = update(table).where(key).values(**values)
    return statement


def _started_values(event: TaskStarted, at: int) -> dict[str, Any]:
    """What a task.started writes to its task's row (besides its state)."""
    # Older orchestrators sent neither address nor ports: keep what the placement said.
    values: dict[str, Any] = {"node": event.node, "pid": event.pid, "launched_time": at}
    if event.address:
        values["ip"] = event.address
    if event.ports:
        values["ports"] = _container_ports(event.ports)
    if event.note:
        values["note"] = event.note
    if event.image_digest:
        values["image_digest"] = event.image_digest
    return values


def _completed_values(event: TaskCompleted, at: int) -> dict[str, Any]:
    pulled = {"image_digest": event.image_digest} if event.image_digest else {}
    return {
        **pulled,
        "state": states.state_for_exit(event.exit_code),
        "exit_code": event.exit_code,
        "exit_spec": states.exit_spec(event.exit_code, event.failure),
        "exit_diagnostics": event.diagnostics or None,
        "completed_time": at,
    }


async def _apply_task_run(
    conn: AsyncConnection, run: Sequence[TaskEvent], rows: _JobRows, rules: Rules
) -> None:
    """A run of one job's task.started (or task.completed) events: the rows that exist updated
    in one executemany per set of columns; a row not there yet is made as a single event makes it."""
    job_id = run[0].job_id
    job = await rows.get(conn, job_id)
    if job is None:
        return  # a job this read model never saw submitted
    existing = await _existing_tasks(conn, job_id, run)
    kind = "started" if isinstance(run[0], TaskStarted) else "completed"
    if kind == "started":  # the attempt and the job run from the first start on, as one by one
        first: dict[int, int] = {}
        for event in run:
            first.setdefault(event.attempt, states.epoch_ms(event.occurred_at))
        for attempt, at in first.items():
            await _start_attempt(conn, job_id, attempt, at)
        _job_runs(job_id, job, rows, first[run[0].attempt])
    batches: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    revision = await rows.revision(conn, job_id)
    for event in run:
        if task_attempt_key(event) not in existing:
            await _apply(conn, event, rows, rules)
            continue
        at = states.epoch_ms(event.occurred_at)
        if isinstance(event, TaskStarted):
            values = _started_values(event, at)
        else:
            values = _completed_values(event, at)
        keys = dict(zip(_KEY_PARAMS.values(), task_attempt_key(event), strict=True))
        batches.setdefault(tuple(values), []).append(
            {**keys, **{f"v_{c}": v for c, v in values.items()}, "v_revision": revision}
        )
    for columns, parameters in batches.items():
        await conn.execute(_prepared_update(task_attempts, kind, columns), parameters)


async def _upsert_attempt(conn: AsyncConnection, job_id: str, attempt: int, **values: Any) -> None:
    parameters = {"k_job_id": job_id, "k_attempt": attempt, **{f"v_{c}": v for c, v in values.items()}}
    if not (
        await conn.execute(_prepared_update(job_attempts, "attempt", tuple(values)), parameters)
    ).rowcount:
        base = {"state": "WAITING", "sub_state": states.SUB_STATE_PREPARING}
        await conn.execute(_INSERT_ATTEMPT, {"job_id": job_id, "attempt": attempt, **base, **values})


async def _start_attempt(conn: AsyncConnection, job_id: str, attempt: int, at: int) -> None:
    """The attempt runs; its launch time is the first task's start (one write)."""
    running: dict[str, Any] = {"state": "RUNNING", "sub_state": states.SUB_STATE_RUNNING}
    if not (
        await conn.execute(_START_ATTEMPT, {"k_job_id": job_id, "k_attempt": attempt, "at": at})
    ).rowcount:
        await conn.execute(
            _INSERT_ATTEMPT, {"job_id": job_id, "attempt": attempt, **running, "launched_time": at}
        )


def _task_key(job_id: str, attempt: int, role: str, index: int, task_attempt: int) -> Any:
    return and_(
        task_attempts.c.job_id == job_id,
        task_attempts.c.job_attempt == attempt,
        task_attempts.c.role == role,
        task_attempts.c.task_index == index,
        task_attempts.c.task_attempt == task_attempt,
    )


async def _upsert_task(conn: AsyncConnection, event: TaskStarted | TaskCompleted, revision: int) -> None:
    """Write what the event says to its task attempt's row (as a run of such events does), or
    insert the row when the attempt has none yet."""
    at = states.epoch_ms(event.occurred_at)
    if isinstance(event, TaskStarted):
        kind, values = "started", _started_values(event, at)
    else:
        kind, values = "completed", _completed_values(event, at)
    job_id, attempt, role, index, task_attempt = key = task_attempt_key(event)
    parameters = {
        **dict(zip(_KEY_PARAMS.values(), key, strict=True)),
        **{f"v_{column}": value for column, value in values.items()},
        "v_revision": revision,
    }
    if (await conn.execute(_prepared_update(task_attempts, kind, tuple(values)), parameters)).rowcount:
        return
    # A retried task inherits where its previous attempt was placed (a first one has none).
    previous = None
    if task_attempt > 0:
        placed_before = select(
            task_attempts.c.node, task_attempts.c.ip, task_attempts.c.gpus, task_attempts.c.ports
        ).where(_task_key(job_id, attempt, role, index, task_attempt - 1))
        previous = (await conn.execute(placed_before)).mappings().first()
    base: dict[str, Any] = {"state": "WAITING", "ports": {}, **(dict(previous) if previous else {})}
    if kind == "started":
        base["state"] = "RUNNING"
    await conn.execute(
        insert(task_attempts).values(
            job_id=job_id,
            job_attempt=attempt,
            role=role,
            task_index=index,
            task_attempt=task_attempt,
            **{**base, **values, "revision": revision},
        )
    )


async def _place_tasks(
    conn: AsyncConnection, job_id: str, event: JobScheduled, at: int, revision: int
) -> None:
    """Each placed task's first attempt row: new rows in one statement, existing ones updated."""
    existing = {
        (role, index)
        for role, index in await conn.execute(_PLACED, {"k_job_id": job_id, "k_attempt": event.attempt})
    }
    fresh: list[dict[str, Any]] = []
    for placement in event.placements:
        values: dict[str, Any] = {
            "node": placement.node,
            "ip": placement.node_address,
            "gpus": ",".join(str(gpu) for gpu in placement.gpu_indices) or None,
            "created_time": at,
            "revision": revision,
        }
        if (placement.role, placement.index) in existing:
            key = _task_key(job_id, event.attempt, placement.role, placement.index, 0)
            await conn.execute(update(task_attempts).where(key).values(**values))
        else:
            fresh.append(
                {
                    "job_id": job_id,
                    "job_attempt": event.attempt,
                    "role": placement.role,
                    "task_index": placement.index,
                    "task_attempt": 0,
                    "state": "WAITING",
                    "ports": {},
                    **values,
                }
            )
    if fresh:
        await conn.execute(_INSERT_TASKS, fresh)


def _job_runs(job_id: str, job: dict[str, Any], rows: _JobRows, at: int) -> None:
    """A task started: the job runs, unless it is over, stopping, or already running."""
    already = (
        job["state"] == "RUNNING"
        and job["sub_state"] == states.SUB_STATE_RUNNING
        and job["launched_time"] is not None
    )  # (every later task of a running job: nothing to write)
    if job["state"] not in states.FINAL and job["state"] != "STOPPING" and not already:
        values: dict[str, Any] = {"state": "RUNNING", "sub_state": states.SUB_STATE_RUNNING}
        if job["launched_time"] is None:
            values["launched_time"] = at
        rows.update(job_id, **values)


def _container_ports(ports: dict[str, list[int]]) -> dict[str, int | str]:
    """OpenPAI's containerPorts: one port as a number, several as its comma-separated port list."""
    return {
        label: numbers[0] if len(numbers) == 1 else ",".join(str(n) for n in numbers)
        for label, numbers in ports.items()
        if numbers
    }


def _trigger_message(role: str | None, index: int | None) -> str | None:
    return f"task {role}[{index}] ended the attempt" if role is not None else None


def _retried_exit(event: JobRetrying) -> dict[str, Any]:
    """How a retried attempt ended, for the attempt history; nothing when the event lacks it."""
    if event.exit_code is None:
        return {}
    return {
        "exit_code": event.exit_code,
        "exit_spec": states.exit_spec(event.exit_code, event.failure),
        "exit_trigger_message": _trigger_message(event.trigger_role, event.trigger_index),
        "exit_trigger_role": event.trigger_role,
        "exit_trigger_index": event.trigger_index,
    }


@dataclass(frozen=True)
class ProjectedJob:
    """The job an event is about, as the batch knows it, and where its rule writes."""

    conn: AsyncConnection
    rows: _JobRows
    id: str
    row: dict[str, Any]
    final: bool  # the job was over before this event
    at: int  # when the event happened, in epoch milliseconds


Rule = Callable[[ProjectedJob, Any], Awaitable[None]]
"""What one type of event writes about the job it is about."""
Rules = Mapping[type[EventBase], Rule]
"""The rule of each type of event about an existing job; other types write nothing."""


async def _apply(conn: AsyncConnection, event: EventBase, rows: _JobRows, rules: Rules) -> None:
    """Apply one event by its type's rule in ``rules``. A submission makes the job's row; any
    other event about a job this read model never saw submitted has nothing to attach to."""
    at = states.epoch_ms(event.occurred_at)
    if isinstance(event, JobSubmitted):
        if await rows.get(conn, event.job_id) is None:
            # Rebuilding from the stream (or a submission by another instance): create the row.
            await conn.execute(insert(jobs).values(**job_row_from_config(event, at)))
        return
    rule = rules.get(type(event))
    job_id = _job_id(event)
    if rule is None or job_id is None:
        return
    row = await rows.get(conn, job_id)
    if row is None:
        return
    await rule(ProjectedJob(conn, rows, job_id, row, row["state"] in states.FINAL, at), event)


async def job_pending(job: ProjectedJob, event: JobPending) -> None:
    if not job.final:
        job.rows.update(job.id, pending_reason=event.reason, sub_state=states.SUB_STATE_WAITING)


async def job_scheduled(job: ProjectedJob, event: JobScheduled) -> None:
    await _upsert_attempt(
        job.conn, job.id, event.attempt, created_time=job.at, sub_state=states.SUB_STATE_PREPARING
    )
    await _place_tasks(job.conn, job.id, event, job.at, await job.rows.revision(job.conn, job.id))
    if not job.final:
        values: dict[str, Any] = {
            "attempt": event.attempt,
            "pending_reason": None,
            "sub_state": states.SUB_STATE_PREPARING,
        }
        if job.row["created_time"] is None:
            values["created_time"] = job.at
        job.rows.update(job.id, **values)


async def job_preempting(job: ProjectedJob, event: JobPreempting) -> None:
    if not job.final:
        job.rows.update(job.id, sub_state=states.SUB_STATE_DELETING, pending_reason=event.reason)


async def task_started(job: ProjectedJob, event: TaskStarted) -> None:
    # A task that ended at once may be reported ended before it is reported started (the
    # executor publishes its exit while the orchestrator still records the launches): its
    # row keeps the state its end gave it (see _prepared_update).
    await _upsert_task(job.conn, event, await job.rows.revision(job.conn, job.id))
    await _start_attempt(job.conn, job.id, event.attempt, job.at)
    _job_runs(job.id, job.row, job.rows, job.at)


async def task_completed(job: ProjectedJob, event: TaskCompleted) -> None:
    await _upsert_task(job.conn, event, await job.rows.revision(job.conn, job.id))


async def job_retrying(job: ProjectedJob, event: JobRetrying) -> None:
    await _upsert_attempt(
        job.conn,
        job.id,
        event.attempt,
        state="FAILED",
        sub_state=states.SUB_STATE_ATTEMPT_DONE,
        completed_time=job.at,
        exit_diagnostics=event.reason or None,
        **_retried_exit(event),
    )
    if not job.final:
        kind_column = f"retries_{event.kind}"
        job.rows.update(
            job.id,
            retries=job.row["retries"] + 1,
            **{kind_column: job.row[kind_column] + 1},
            retry_delay_ms=int(event.delay_seconds * 1000),
            attempt=event.next_attempt,
            state="WAITING" if job.row["state"] != "STOPPING" else "STOPPING",
            sub_state=states.SUB_STATE_WAITING,
        )


async def job_completed(job: ProjectedJob, event: JobCompleted) -> None:
    spec = states.exit_spec(event.exit_code, event.failure)
    trigger = _trigger_message(event.trigger_role, event.trigger_index)
    exit_values: dict[str, Any] = {
        "exit_code": event.exit_code,
        "exit_spec": spec,
        "exit_diagnostics": event.diagnostics or None,
        "exit_trigger_message": trigger,
        "exit_trigger_role": event.trigger_role,
        "exit_trigger_index": event.trigger_index,
        "completed_time": job.at,
    }
    await _upsert_attempt(
        job.conn,
        job.id,
        event.attempt,
        state=event.state.value,
        sub_state=states.SUB_STATE_COMPLETED,
        **exit_values,
    )
    await job.conn.execute(_RECORD_RUN, {"k_id": job.id})
    # Tasks still shown running when the attempt ended were stopped with it.
    await job.conn.execute(
        _STOP_TASKS,
        {
            "k_job_id": job.id,
            "k_attempt": event.attempt,
            "v_state": "STOPPED" if event.state.value == "STOPPED" else "FAILED",
            "v_at": job.at,
            "v_revision": await job.rows.revision(job.conn, job.id),
        },
    )
    if not job.final:
        job.rows.update(
            job.id,
            state=event.state.value,
            sub_state=states.SUB_STATE_COMPLETED,
            attempt=event.attempt,
            pending_reason=None,
            **exit_values,
        )


async def job_stop_requested(job: ProjectedJob, event: JobStopRequested) -> None:
    if not job.final:
        job.rows.update(job.id, execution_type="STOP", state="STOPPING", sub_state=states.SUB_STATE_DELETING)


async def job_tagged(job: ProjectedJob, event: JobTagged) -> None:
    # The tag routes changed the row already; replaying the stream gets the same tags back.
    await change_tag_in(job.conn, job.id, event.tag, add=not event.removed)
