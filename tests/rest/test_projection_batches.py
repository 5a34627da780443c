"""Group commits: the projection's events and the submissions' rows, many in one transaction,
still once each, in each job's order, and with a failing item failing alone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from libs.backbone.queueing import KeyedWorkQueue
from libs.protocol.events import (
    EventBase,
    FailureInfo,
    JobCompleted,
    JobPending,
    JobScheduled,
    JobState,
    JobSubmitted,
    TaskCompleted,
    TaskPlacement,
    TaskStarted,
)
from services.rest.adapters import projecting
from services.rest.adapters.jobs_store import DuplicateJobError, JobInserter, attempts_of, find_job, tasks_of
from services.rest.adapters.tables import applied_events
from services.rest.core import states, views
from services.rest.core.task_table import TaskTable
from services.rest.core.totals import job_row_from_config
from services.rest.handlers import Projector, apply_event, apply_events
from tests.support.jobs import job_model

PLACEMENT = (TaskPlacement(role="worker", index=0, node="node-a", node_address="10.0.0.1"),)


def submitted(job_id: str) -> JobSubmitted:
    config = {"taskRoles": {"worker": {"instances": 1, "resourcePerInstance": {"gpu": 0}}}}
    return JobSubmitted(
        job_id=job_id,
        user="alice",
        name=f"job-{job_id}",
        virtual_cluster="default",
        config=job_model(config),
    )


def lifecycle(job_id: str) -> list[EventBase]:
    return [
        submitted(job_id),
        JobPending(job_id=job_id, reason="waiting"),
        JobScheduled(job_id=job_id, attempt=0, placements=PLACEMENT),
        TaskStarted(job_id=job_id, attempt=0, role="worker", index=0, node="node-a", pid=7),
        TaskCompleted(job_id=job_id, attempt=0, role="worker", index=0, exit_code=0),
        JobCompleted(job_id=job_id, attempt=0, state=JobState.SUCCEEDED, exit_code=0),
    ]


async def applied_count(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int(await conn.scalar(select(func.count()).select_from(applied_events)) or 0)


def count_commits(engine: AsyncEngine) -> list[int]:
    commits = [0]

    def on_commit(_conn: Any) -> None:
        commits[0] += 1

    event.listen(engine.sync_engine, "commit", on_commit)
    return commits


async def test_a_batch_applies_each_jobs_events_in_order_in_one_commit(engine: AsyncEngine) -> None:
    # Two whole lifecycles interleaved in one batch, as a burst from the stream would bring them.
    first, second = lifecycle("j1"), lifecycle("j2")
    batch = [e for pair in zip(first, second, strict=True) for e in pair]
    commits = count_commits(engine)
    assert await apply_events(engine, batch) == [True] * len(batch)
    assert commits[0] == 1
    for job_id in ("j1", "j2"):
        job = await find_job(engine, "alice", f"job-{job_id}")
        assert job is not None
        assert (job["state"], job["exit_code"], job["pending_reason"], job["attempt"]) == (
            "SUCCEEDED",
            0,
            None,
            0,
        )
        assert [a["state"] for a in await attempts_of(engine, job_id)] == ["SUCCEEDED"]
        tasks = await tasks_of(engine, job_id)
        assert [(t["state"], t["pid"], t["ip"]) for t in tasks] == [("SUCCEEDED", 7, "10.0.0.1")]
    assert await applied_count(engine) == len(batch)


async def test_events_applied_before_or_twice_in_a_batch_change_nothing(engine: AsyncEngine) -> None:
    first = lifecycle("j1")
    assert await apply_events(engine, first[:3]) == [True, True, True]
    # A redelivery of what was applied, the rest, and one event twice within the batch.
    batch = [*first[:3], *first[3:], first[4]]
    assert await apply_events(engine, batch) == [False, False, False, True, True, True, False]
    assert await apply_event(engine, first[5]) is False
    job = await find_job(engine, "alice", "job-j1")
    assert job is not None
    assert job["state"] == "SUCCEEDED"
    assert await applied_count(engine) == len(first)


async def test_the_projector_commits_concurrent_events_together(engine: AsyncEngine) -> None:
    projector = Projector(engine)
    commits = count_commits(engine)
    events = [submitted(f"j{n}") for n in range(40)]
    results = await asyncio.gather(*(projector.apply(e) for e in events))
    await projector.close()
    assert results == [True] * 40
    assert await applied_count(engine) == 40
    # Handed over in the same turn of the loop: fewer commits than events (one, unless split).
    assert commits[0] < 40


async def test_a_failing_event_fails_alone(engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    real_apply = projecting._apply

    async def failing(conn: Any, event: EventBase, rows: Any, rules: Any) -> None:
        if getattr(event, "job_id", None) == "bad":
            raise RuntimeError("this event cannot be applied")
        await real_apply(conn, event, rows, rules)

    monkeypatch.setattr(projecting, "_apply", failing)
    projector = Projector(engine)
    outcomes = await asyncio.gather(
        *(projector.apply(submitted(job_id)) for job_id in ("ok1", "bad", "ok2")), return_exceptions=True
    )
    await projector.close()
    assert outcomes[0] is True
    assert outcomes[2] is True
    assert isinstance(outcomes[1], RuntimeError)
    assert await find_job(engine, "alice", "job-ok1") is not None
    assert await find_job(engine, "alice", "job-bad") is None
    # The failed event's id was not recorded: its redelivery is applied once the cause is gone.
    monkeypatch.setattr(projecting, "_apply", real_apply)
    assert await apply_event(engine, submitted("bad")) is True


async def test_concurrent_submissions_share_commits_and_a_duplicate_fails_alone(engine: AsyncEngine) -> None:
    inserter = JobInserter(engine)
    commits = count_commits(engine)
    names = [f"job-s{n}" for n in range(30)] + ["job-s7"]  # the last repeats a name
    rows = [
        job_row_from_config(submitted(f"s{n}").model_copy(update={"name": name}), 1000 + n)
        for n, name in enumerate(names)
    ]
    outcomes = await asyncio.gather(*(inserter.insert(row) for row in rows), return_exceptions=True)
    await inserter.close()
    assert outcomes[:30] == [None] * 30
    assert isinstance(outcomes[30], DuplicateJobError)
    assert str(outcomes[30]) == "alice~job-s7"
    for name in names[:30]:
        assert await find_job(engine, "alice", name) is not None
    seventh = await find_job(engine, "alice", "job-s7")
    assert seventh is not None
    assert seventh["id"] == "s7"  # the first one keeps the name
    # One failed group (rolled back) and then a commit per row, never more than that.
    assert commits[0] <= 31


async def test_submissions_in_one_turn_of_the_loop_commit_together(engine: AsyncEngine) -> None:
    inserter = JobInserter(engine)
    commits = count_commits(engine)
    rows = [job_row_from_config(submitted(f"t{n}"), 1000 + n) for n in range(20)]
    assert await asyncio.gather(*(inserter.insert(row) for row in rows)) == [None] * 20
    await inserter.close()
    assert commits[0] == 1
    assert len([row for row in rows if await find_job(engine, "alice", row["name"]) is not None]) == 20


async def test_an_attempt_keeps_its_first_tasks_start_as_its_launch_time(engine: AsyncEngine) -> None:
    def started(index: int, second: int) -> TaskStarted:
        return TaskStarted(
            job_id="l1",
            attempt=0,
            role="worker",
            index=index,
            node="node-a",
            pid=7 + index,
            occurred_at=datetime(2026, 1, 1, 0, 0, second, tzinfo=UTC),
        )

    await apply_events(engine, [submitted("l1")])
    # No job.scheduled seen: the first task's start creates the attempt and its task rows.
    assert await apply_events(engine, [started(0, 10)]) == [True]
    assert await apply_events(engine, [started(1, 20)]) == [True]
    [attempt] = await attempts_of(engine, "l1")
    first_start_ms = int(datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC).timestamp() * 1000)
    assert (attempt["state"], attempt["launched_time"]) == ("RUNNING", first_start_ms)
    tasks = await tasks_of(engine, "l1")
    assert [(t["task_index"], t["state"], t["pid"]) for t in tasks] == [(0, "RUNNING", 7), (1, "RUNNING", 8)]


async def test_one_jobs_many_events_share_commits_in_stream_order(engine: AsyncEngine) -> None:
    """The consume loop pipelines a job's queued events (KeyedWorkQueue) into the projector."""
    tasks = 120
    placements = tuple(
        TaskPlacement(role="worker", index=i, node="node-a", node_address="10.0.0.1") for i in range(tasks)
    )
    config = {"taskRoles": {"worker": {"instances": tasks, "resourcePerInstance": {"gpu": 0}}}}
    events: list[EventBase] = [
        JobSubmitted(
            job_id="big", user="alice", name="job-big", virtual_cluster="default", config=job_model(config)
        ),
        JobScheduled(job_id="big", attempt=0, placements=placements),
    ]
    for i in range(tasks):  # each task's end right behind its start: order matters within the job
        events.append(TaskStarted(job_id="big", attempt=0, role="worker", index=i, node="node-a", pid=i))
        events.append(TaskCompleted(job_id="big", attempt=0, role="worker", index=i, exit_code=i % 2))
    events.append(JobCompleted(job_id="big", attempt=0, state=JobState.FAILED, exit_code=1))
    projector = Projector(engine)
    queue = KeyedWorkQueue(limit=1000, pipeline=64)
    commits = count_commits(engine)
    outcomes: list[bool] = []

    def work(e: EventBase) -> Callable[[], Awaitable[None]]:
        async def apply() -> None:
            outcomes.append(await projector.apply(e))

        return apply

    for e in events:
        queue.submit("big", work(e))
    await asyncio.wait_for(queue.join(), 60)
    await projector.close()
    assert outcomes == [True] * len(events)
    assert commits[0] <= len(events) // 32  # a few commits, not one per event
    job = await find_job(engine, "alice", "job-big")
    assert job is not None
    assert (job["state"], job["launched_time"] is not None) == ("FAILED", True)
    rows = await tasks_of(engine, "big", 0)
    assert len(rows) == tasks
    assert {(r["task_index"], r["state"]) for r in rows} == {
        (i, "SUCCEEDED" if i % 2 == 0 else "FAILED") for i in range(tasks)
    }


def busy_job(job_id: str) -> list[EventBase]:
    """A job whose task events take every path of a run: rows placed and not, a task reported
    ended before started, a retried task attempt, ports and notes on some starts only, a start
    given twice, a failure with its rule, and another job's events cutting the runs."""
    moment = iter(range(1, 10_000))

    def at() -> datetime:
        return datetime.fromtimestamp(1_780_000_000 + next(moment), tz=UTC)

    def started(role: str, index: int, task_attempt: int = 0, **extra: Any) -> TaskStarted:
        return TaskStarted(
            job_id=job_id,
            attempt=0,
            role=role,
            index=index,
            task_attempt=task_attempt,
            node="node-b",
            pid=100 + index,
            occurred_at=at(),
            **extra,
        )

    def ended(role: str, index: int, code: int, task_attempt: int = 0, **extra: Any) -> TaskCompleted:
        return TaskCompleted(
            job_id=job_id,
            attempt=0,
            role=role,
            index=index,
            task_attempt=task_attempt,
            exit_code=code,
            occurred_at=at(),
            **extra,
        )

    placements = tuple(
        TaskPlacement(role=role, index=i, node="node-a", node_address="10.0.0.1", gpu_indices=(i,))
        for role, count in (("worker", 6), ("ps", 2))
        for i in range(count)
    )
    config = {"taskRoles": {"worker": {"instances": 6}, "ps": {"instances": 2}, "extra": {"instances": 1}}}
    other = f"{job_id}-other"
    rule = FailureInfo(code=-7351, phrase="disk full", type="permanent", reason="no space left")
    return [
        JobSubmitted(
            job_id=job_id,
            user="alice",
            name=f"job-{job_id}",
            virtual_cluster="default",
            config=job_model(config),
        ),
        submitted(other),
        JobScheduled(job_id=job_id, attempt=0, placements=placements, occurred_at=at()),
        ended("worker", 5, 0),  # ended before it is reported started
        started("worker", 0),
        started("worker", 1, address="10.0.0.9", ports={"http": [8080], "ssh": [22, 23]}),
        started("worker", 2, note="runs as a local process"),
        started("extra", 0),  # no placement row: made by the start itself
        started("worker", 3),
        TaskStarted(job_id=other, attempt=0, role="worker", index=0, node="node-c", pid=1, occurred_at=at()),
        started("worker", 4),
        started("worker", 5),
        started("worker", 4),  # the same task attempt again, under another event id
        started("ps", 0),
        started("ps", 1),
        ended("worker", 0, 0),
        ended("worker", 1, 1, diagnostics="exit 1"),
        ended("worker", 1, 1),  # again: a run breaks here
        ended("worker", 2, -7351, failure=rule),
        started("worker", 1, task_attempt=1),  # a retry: inherits its previous attempt's placement
        ended("worker", 1, 0, task_attempt=1),
        ended("worker", 3, 0),
        ended("extra", 0, 0),
        ended("ps", 0, 0),
        JobCompleted(job_id=job_id, attempt=0, state=JobState.FAILED, exit_code=-7351, occurred_at=at()),
    ]


async def read_model(engine: AsyncEngine, job_id: str) -> dict[str, Any]:
    """The job's rows, leaving out its id, name and the times its submission set, and the
    revision stamps (one per transaction, so they count batches; checked here to be in order)."""
    left_out = ("job_id", "id", "name", "search_text", "submission_time", "tasks_revision", "revision")

    def strip(row: Any) -> dict[str, Any]:
        return {k: v for k, v in dict(row).items() if k not in left_out}

    found = await find_job(engine, "alice", f"job-{job_id}")
    assert found is not None
    tasks = await tasks_of(engine, job_id)
    assert all(1 <= task["revision"] <= found["tasks_revision"] for task in tasks)
    return {
        "job": {k: v for k, v in strip(found).items() if k != "created_time"},
        "attempts": [strip(row) for row in await attempts_of(engine, job_id)],
        "tasks": [strip(row) for row in tasks],
    }


@pytest.mark.parametrize("batch", [2, 5, 64])
async def test_runs_of_task_events_end_as_applying_them_one_by_one(engine: AsyncEngine, batch: int) -> None:
    one_by_one, together = busy_job("single"), busy_job("runs")
    for before_the_end in (True, False):  # compared while tasks run, and once the job is over
        part = slice(None, -1) if before_the_end else slice(-1, None)
        for e in one_by_one[part]:
            assert await apply_events(engine, [e]) == [True]
        outcomes = []
        events = together[part]
        for start in range(0, len(events), batch):
            outcomes += await apply_events(engine, events[start : start + batch])
        assert outcomes == [True] * len(events)
        expected, got = await read_model(engine, "single"), await read_model(engine, "runs")
        for rows in ("job", "attempts", "tasks"):
            assert got[rows] == expected[rows], rows
    states = {(t["role"], t["task_index"], t["task_attempt"]): t["state"] for t in got["tasks"]}
    assert states[("worker", 5, 0)] == "SUCCEEDED"  # its end, reported first, stands
    assert states[("worker", 1, 1)] == "SUCCEEDED"
    retried = next(
        t for t in got["tasks"] if (t["role"], t["task_index"], t["task_attempt"]) == ("worker", 1, 1)
    )
    assert (retried["ip"], retried["gpus"]) == ("10.0.0.9", "1")  # inherited from attempt 0


async def test_a_run_of_task_events_is_a_few_statements(engine: AsyncEngine) -> None:
    tasks = 60
    placements = tuple(
        TaskPlacement(role="worker", index=i, node="node-a", node_address="10.0.0.1") for i in range(tasks)
    )
    config = {"taskRoles": {"worker": {"instances": tasks}}}
    await apply_events(
        engine,
        [
            JobSubmitted(
                job_id="many",
                user="alice",
                name="job-many",
                virtual_cluster="default",
                config=job_model(config),
            ),
            JobScheduled(job_id="many", attempt=0, placements=placements),
        ],
    )
    statements = [0]

    def on_execute(*_args: Any) -> None:
        statements[0] += 1

    event.listen(engine.sync_engine, "before_cursor_execute", on_execute)
    starts = [
        TaskStarted(job_id="many", attempt=0, role="worker", index=i, node="node-a", pid=i)
        for i in range(tasks)
    ]
    ends = [
        TaskCompleted(job_id="many", attempt=0, role="worker", index=i, exit_code=0) for i in range(tasks)
    ]
    assert await apply_events(engine, starts) == [True] * tasks
    assert await apply_events(engine, ends) == [True] * tasks
    event.remove(engine.sync_engine, "before_cursor_execute", on_execute)
    # Per batch: the applied ids read and written, the job's row, the run's rows read, the
    # attempt and the job marked running, one executemany for the run.
    assert statements[0] <= 16, statements[0]
    tasks_now = await tasks_of(engine, "many")
    assert [t["state"] for t in tasks_now] == ["SUCCEEDED"] * tasks
    assert all(t["pid"] == t["task_index"] for t in tasks_now)


@pytest.mark.parametrize("batch", [1, 3, 64])
async def test_a_detail_brought_up_to_date_from_the_rows_past_its_revision_is_a_full_build(
    engine: AsyncEngine, batch: int
) -> None:
    """Each transaction stamps the task rows it writes with the job's raised tasks_revision, so the
    rows above a revision are every row changed since (services/rest/core/task_table.py)."""
    events = busy_job("stamped")
    table = TaskTable(0)
    revisions = []
    for start in range(0, len(events), batch):
        await apply_events(engine, events[start : start + batch])
        job = await find_job(engine, "alice", "job-stamped")
        assert job is not None
        revisions.append(job["tasks_revision"])
        if start % (2 * batch) == 0:  # not every change is read before the next
            table.apply(
                job, await tasks_of(engine, "stamped", 0, after=table.revision), job["tasks_revision"]
            )
            built = views.task_roles(job, 0, await tasks_of(engine, "stamped", 0))
            whole = {"taskRoles": built, "sharedGpus": views.shared_gpus(built)}
            assert json.loads(b"{" + table.encoded(job) + b"}") == whole
    assert revisions == sorted(revisions)
    assert revisions[-1] > 0
    unchanged = await tasks_of(engine, "stamped", 0, after=revisions[-1])
    assert unchanged == []


async def test_a_burst_of_job_events_writes_the_job_rows_in_one_statement(engine: AsyncEngine) -> None:
    """Each job's row is written once per batch, and jobs changing the same columns together."""
    jobs = [f"burst-{i}" for i in range(20)]
    await apply_events(engine, [submitted(job_id) for job_id in jobs])
    updates: list[str] = []

    def on_execute(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE JOBS"):
            updates.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", on_execute)
    pending = [JobPending(job_id=job_id, reason=f"no GPU for {job_id}") for job_id in jobs]
    pending.append(JobPending(job_id=jobs[0], reason="still no GPU"))  # a job's later event wins
    assert await apply_events(engine, pending) == [True] * len(pending)
    event.remove(engine.sync_engine, "before_cursor_execute", on_execute)
    assert len(updates) == 1, updates
    for job_id in jobs:
        job = await find_job(engine, "alice", f"job-{job_id}")
        assert job is not None
        reason = "still no GPU" if job_id == jobs[0] else f"no GPU for {job_id}"
        assert (job["pending_reason"], job["sub_state"]) == (reason, states.SUB_STATE_WAITING), job_id
