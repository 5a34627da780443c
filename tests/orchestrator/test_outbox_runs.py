"""Which outbox events go to the bus together: runs of one kind, each of another task."""

from __future__ import annotations

from libs.protocol.events import (
    EventBase,
    JobCompleted,
    JobRetrying,
    JobState,
    TaskCompleted,
    TaskStarted,
    task_event_runs,
)
from services.orchestrator.handlers import PUBLISH_WINDOW


def started(index: int, task_attempt: int = 0) -> TaskStarted:
    return TaskStarted(job_id="j", attempt=0, role="worker", index=index, task_attempt=task_attempt, node="n")


def ended(index: int) -> TaskCompleted:
    return TaskCompleted(job_id="j", attempt=0, role="worker", index=index, exit_code=0)


def shape(runs: list[list[EventBase]]) -> list[list[str]]:
    return [[event.event_id for event in run] for run in runs]


def test_a_decisions_launches_go_out_in_windows() -> None:
    events = [started(i) for i in range(PUBLISH_WINDOW * 2 + 10)]
    runs = task_event_runs(events, longest=PUBLISH_WINDOW)
    assert [len(run) for run in runs] == [PUBLISH_WINDOW, PUBLISH_WINDOW, 10]
    assert [event for run in runs for event in run] == events  # nothing reordered


def test_a_job_level_event_is_a_run_of_its_own_between_the_others() -> None:
    done = JobCompleted(job_id="j", attempt=0, state=JobState.SUCCEEDED, exit_code=0)
    retry = JobRetrying(job_id="j", attempt=0, next_attempt=1, kind="platform", counted=True)
    events: list[EventBase] = [started(0), started(1), retry, started(2), done, started(3)]
    assert shape(task_event_runs(events, longest=PUBLISH_WINDOW)) == shape(
        [[events[0], events[1]], [retry], [events[3]], [done], [events[5]]]
    )


def test_a_change_of_kind_or_a_task_seen_again_starts_a_new_run() -> None:
    events: list[EventBase] = [
        started(0),
        started(1),
        ended(0),
        ended(1),
        started(1, 1),
        started(1, 1),
        started(2),
    ]
    assert shape(task_event_runs(events, longest=PUBLISH_WINDOW)) == shape(
        [[events[0], events[1]], [events[2], events[3]], [events[4]], [events[5], events[6]]]
    )


def test_an_empty_outbox_has_no_runs() -> None:
    assert task_event_runs([]) == []


def test_another_jobs_event_cuts_a_run() -> None:
    other = TaskStarted(job_id="k", attempt=0, role="worker", index=2, node="n")
    events: list[EventBase] = [started(0), started(1), other, started(2)]
    assert shape(task_event_runs(events)) == shape([[events[0], events[1]], [other], [events[3]]])
