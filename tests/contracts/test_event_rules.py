"""What every subscriber relies on in the events: each kind on its own subject, ids and times
made fresh, the JSON read back as written, and task events cut into runs that may be handled
together."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from libs.protocol.events import (
    AlertResolved,
    EventBase,
    JobPending,
    JobStopRequested,
    MarketplaceItemStarred,
    NodeLost,
    TaskCompleted,
    TaskStarted,
    decode_event,
    encode_event,
    new_event_id,
    task_attempt_key,
    task_event_runs,
    utcnow,
)


def test_each_kind_of_event_is_published_on_the_subject_of_its_own_id() -> None:
    assert JobPending(job_id="j1", reason="r").subject() == "pai.job.j1.job.pending"
    assert (
        TaskStarted(job_id="j2", attempt=1, role="w", index=0, node="n").subject()
        == "pai.job.j2.task.started"
    )
    assert NodeLost(node_id="n1", name="host", reason="r").subject() == "pai.node.n1.node.lost"
    assert AlertResolved(alert_id="a1", name="A").subject() == "pai.alert.a1.alert.resolved"
    starred = MarketplaceItemStarred(
        item_id="i1", name="x", author="a", item_type="data", user="u", star_number=1
    )
    assert starred.subject() == "pai.marketplace.i1.marketplace.item.starred"


def test_an_event_gets_a_fresh_id_and_the_time_in_utc() -> None:
    first, second = new_event_id(), new_event_id()
    assert len(first) == 32
    assert first != second
    assert int(first, 16) >= 0
    now = utcnow()
    assert now.tzinfo is UTC
    assert abs(datetime.now(UTC) - now) < timedelta(seconds=5)
    event = JobStopRequested(job_id="j1", by="alice")
    assert event.version == 1
    assert event.occurred_at.tzinfo is UTC
    assert event.event_id != JobStopRequested(job_id="j1", by="alice").event_id


def test_an_event_reads_back_as_written() -> None:
    event = JobPending(job_id="j1", reason="no GPU free", epoch=3)
    encoded = encode_event(event)
    assert isinstance(encoded, bytes)
    assert json.loads(encoded)["type"] == "job.pending"
    assert decode_event(encoded) == event
    assert decode_event(encoded.decode()) == event


def started(job: str, index: int, attempt: int = 1, task_attempt: int = 0) -> TaskStarted:
    return TaskStarted(
        job_id=job, attempt=attempt, role="w", index=index, task_attempt=task_attempt, node="n"
    )


def completed(job: str, index: int) -> TaskCompleted:
    return TaskCompleted(job_id=job, attempt=1, role="w", index=index, exit_code=0)


def shape(runs: list[list[EventBase]]) -> list[list[str]]:
    out = []
    for run in runs:
        names = []
        for event in run:
            if isinstance(event, TaskStarted | TaskCompleted):
                names.append(f"{event.type[5:]}:{event.job_id}:{event.index}")
            else:
                names.append(getattr(event, "type"))  # noqa: B009
        out.append(names)
    return out


def test_task_events_of_one_job_and_one_kind_form_a_run() -> None:
    pending = JobPending(job_id="j1", reason="r")
    events: list[EventBase] = [
        started("j1", 0),
        started("j1", 1),
        completed("j1", 0),
        completed("j1", 1),
        started("j2", 0),
        pending,
        started("j2", 1),
    ]
    assert shape(task_event_runs(events)) == [
        ["started:j1:0", "started:j1:1"],
        ["completed:j1:0", "completed:j1:1"],
        ["started:j2:0"],
        ["job.pending"],
        ["started:j2:1"],
    ]


def test_the_same_task_attempt_twice_starts_a_new_run() -> None:
    events: list[EventBase] = [started("j1", 0), started("j1", 1), started("j1", 0), started("j1", 1)]
    assert shape(task_event_runs(events)) == [
        ["started:j1:0", "started:j1:1"],
        ["started:j1:0", "started:j1:1"],
    ]
    retried: list[EventBase] = [
        started("j1", 0),
        started("j1", 0, task_attempt=1),
        started("j1", 0, attempt=2),
    ]
    assert len(task_event_runs(retried)) == 1


def test_a_run_holds_at_most_the_longest_asked() -> None:
    events: list[EventBase] = [started("j1", i) for i in range(5)]
    assert [len(run) for run in task_event_runs(events, longest=2)] == [2, 2, 1]
    assert [len(run) for run in task_event_runs(events)] == [5]
    assert task_event_runs([]) == []
    other: list[EventBase] = [JobPending(job_id="j1", reason="a"), JobPending(job_id="j1", reason="b")]
    assert [len(run) for run in task_event_runs(other)] == [1, 1]


def test_a_task_attempts_key_names_job_attempt_role_index_and_try() -> None:
    assert task_attempt_key(started("j1", 3, attempt=2, task_attempt=1)) == ("j1", 2, "w", 3, 1)
