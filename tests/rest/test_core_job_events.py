"""A job's lifecycle facts as OpenPAI's job events, whole: each fact's event as a client reads it,
repeats folded with a count, the newest first, and facts that are not lifecycle left out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from libs.protocol.events import (
    Event,
    FailureInfo,
    JobCompleted,
    JobPending,
    JobPreempting,
    JobRetrying,
    JobScheduled,
    JobState,
    JobStopRequested,
    JobSubmitted,
    NodeCordoned,
    TaskCompleted,
    TaskPlacement,
    TaskStarted,
)
from services.rest.core.job_events import job_events, timestamp
from services.rest.core.states import framework_name, task_uid
from tests.support.jobs import job_model

T0 = datetime(2026, 11, 1, 8, 0, 0, 250_000, tzinfo=UTC)
JOB = {"username": "alice", "name": "mnist"}
FRAME = framework_name("alice", "mnist")
OOM = FailureInfo(code=137, phrase="ContainerOOMKilled", type="transient")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def events(*facts: Event) -> list[dict[str, Any]]:
    return job_events(JOB, ((fact, position) for position, fact in enumerate(facts, start=1)))


def job_wide(event: Event, kind: str, reason: str, message: str, source: str, when: str) -> dict[str, Any]:
    return {
        "uid": event.event_id,
        "frameworkName": FRAME,
        "podUid": "",
        "taskroleName": "",
        "taskName": "",
        "taskIndex": -1,
        "type": kind,
        "reason": reason,
        "message": message,
        "firstTimestamp": when,
        "lastTimestamp": when,
        "count": 1,
        "sourceComponent": source,
        "sourceHost": None,
    }


def test_the_event_time_is_kubernetes_with_milliseconds_in_utc() -> None:
    assert timestamp(T0) == "2026-11-01T08:00:00.250Z"
    assert timestamp(datetime(2026, 1, 2, 3, 4, 5, 999_999, tzinfo=UTC)) == "2026-01-02T03:04:05.999Z"


def test_each_job_wide_fact_is_one_event_of_the_job() -> None:
    submitted = JobSubmitted(
        job_id="j1",
        user="alice",
        name="mnist",
        virtual_cluster="vc1",
        config=job_model({}),
        occurred_at=at(0),
    )
    pending = JobPending(job_id="j1", reason="no node has 8 GPUs free", occurred_at=at(1))
    preempting = JobPreempting(job_id="j1", by_job_id="j9", reason="higher priority", occurred_at=at(2))
    quiet = JobPreempting(job_id="j1", by_job_id="j9", reason="", occurred_at=at(3))
    stop = JobStopRequested(job_id="j1", by="bob", occurred_at=at(4))
    assert events(submitted, pending, preempting, quiet, stop) == [
        job_wide(
            stop,
            "Normal",
            "StopRequested",
            "Stop requested by bob.",
            "rest-server",
            "2026-11-01T08:00:04.250Z",
        ),
        job_wide(quiet, "Warning", "Preempting", "Preempted.", "scheduler", "2026-11-01T08:00:03.250Z"),
        job_wide(
            preempting,
            "Warning",
            "Preempting",
            "Preempted by job j9: higher priority",
            "scheduler",
            "2026-11-01T08:00:02.250Z",
        ),
        job_wide(
            pending,
            "Warning",
            "FailedScheduling",
            "no node has 8 GPUs free",
            "scheduler",
            "2026-11-01T08:00:01.250Z",
        ),
        job_wide(
            submitted,
            "Normal",
            "Submitted",
            "Job submitted by alice to virtual cluster vc1.",
            "rest-server",
            "2026-11-01T08:00:00.250Z",
        ),
    ]


def test_a_placement_is_one_event_per_task_and_a_tasks_end_names_where_it_ran() -> None:
    scheduled = JobScheduled(
        job_id="j1",
        attempt=1,
        placements=(
            TaskPlacement(role="worker", index=0, node="n1", node_address="10.0.0.1"),
            TaskPlacement(role="ps", index=0, node="n2", node_address="10.0.0.2"),
        ),
        occurred_at=at(0),
    )
    started = TaskStarted(
        job_id="j1", attempt=1, role="worker", index=0, task_attempt=1, node="n1", occurred_at=at(1)
    )
    failed = TaskCompleted(
        job_id="j1",
        attempt=1,
        role="worker",
        index=0,
        task_attempt=1,
        exit_code=137,
        failure=OOM,
        diagnostics="killed",
        occurred_at=at(2),
    )
    other = TaskCompleted(job_id="j1", attempt=1, role="ps", index=0, exit_code=0, occurred_at=at(3))
    found = events(scheduled, started, failed, other)
    worker = {
        "podUid": task_uid("j1", "worker", 0),
        "taskroleName": "worker",
        "taskName": f"{FRAME}-worker-0",
        "taskIndex": 0,
    }
    ps = {
        "podUid": task_uid("j1", "ps", 0),
        "taskroleName": "ps",
        "taskName": f"{FRAME}-ps-0",
        "taskIndex": 0,
    }
    assert found == [
        {
            "uid": other.event_id,
            "frameworkName": FRAME,
            **ps,
            "type": "Normal",
            "reason": "Completed",
            "message": "Attempt 1: task succeeded.",
            "firstTimestamp": "2026-11-01T08:00:03.250Z",
            "lastTimestamp": "2026-11-01T08:00:03.250Z",
            "count": 1,
            "sourceComponent": "orchestrator",
            "sourceHost": None,
        },
        {
            "uid": failed.event_id,
            "frameworkName": FRAME,
            **worker,
            "type": "Warning",
            "reason": "Failed",
            "message": "Attempt 1: task failed with exit code 137 (ContainerOOMKilled): killed.",
            "firstTimestamp": "2026-11-01T08:00:02.250Z",
            "lastTimestamp": "2026-11-01T08:00:02.250Z",
            "count": 1,
            "sourceComponent": "orchestrator",
            "sourceHost": "n1",
        },
        {
            "uid": started.event_id,
            "frameworkName": FRAME,
            **worker,
            "type": "Normal",
            "reason": "Started",
            "message": "Attempt 1: task started on n1.",
            "firstTimestamp": "2026-11-01T08:00:01.250Z",
            "lastTimestamp": "2026-11-01T08:00:01.250Z",
            "count": 1,
            "sourceComponent": "orchestrator",
            "sourceHost": "n1",
        },
        {
            "uid": f"{scheduled.event_id}-worker-0",
            "frameworkName": FRAME,
            **worker,
            "type": "Normal",
            "reason": "Scheduled",
            "message": f"Attempt 1: assigned {FRAME}-worker-0 to n1.",
            "firstTimestamp": "2026-11-01T08:00:00.250Z",
            "lastTimestamp": "2026-11-01T08:00:00.250Z",
            "count": 1,
            "sourceComponent": "scheduler",
            "sourceHost": "n1",
        },
        {
            "uid": f"{scheduled.event_id}-ps-0",
            "frameworkName": FRAME,
            **ps,
            "type": "Normal",
            "reason": "Scheduled",
            "message": f"Attempt 1: assigned {FRAME}-ps-0 to n2.",
            "firstTimestamp": "2026-11-01T08:00:00.250Z",
            "lastTimestamp": "2026-11-01T08:00:00.250Z",
            "count": 1,
            "sourceComponent": "scheduler",
            "sourceHost": "n2",
        },
    ]


def test_a_failed_task_without_a_rule_or_diagnostics_gives_its_code() -> None:
    (event,) = events(
        TaskCompleted(job_id="j1", attempt=2, role="w", index=3, exit_code=1, occurred_at=at(0))
    )
    assert event["message"] == "Attempt 2: task failed with exit code 1."
    assert event["sourceHost"] is None


def test_a_retry_says_the_attempts_the_kind_and_why() -> None:
    reason = JobRetrying(
        job_id="j1",
        attempt=1,
        next_attempt=2,
        kind="platform",
        counted=False,
        reason="node lost",
        occurred_at=at(0),
    )
    rule = JobRetrying(
        job_id="j1", attempt=2, next_attempt=3, kind="user", counted=True, failure=OOM, occurred_at=at(1)
    )
    bare = JobRetrying(
        job_id="j1", attempt=3, next_attempt=4, kind="resource", counted=True, occurred_at=at(2)
    )
    assert [e["message"] for e in events(reason, rule, bare)] == [
        "Attempt 3 ended (resource failure); retrying as attempt 4.",
        "Attempt 2 ended (user failure); retrying as attempt 3: ContainerOOMKilled.",
        "Attempt 1 ended (platform failure); retrying as attempt 2: node lost.",
    ]
    assert {(e["type"], e["reason"], e["sourceComponent"]) for e in events(reason)} == {
        ("Warning", "Retrying", "orchestrator")
    }


def test_a_jobs_end_says_its_state_and_a_failure_its_code() -> None:
    failed = JobCompleted(
        job_id="j1",
        attempt=3,
        state=JobState.FAILED,
        exit_code=137,
        failure=OOM,
        diagnostics="oom",
        occurred_at=at(0),
    )
    plain = JobCompleted(job_id="j1", attempt=1, state=JobState.FAILED, exit_code=2, occurred_at=at(1))
    done = JobCompleted(job_id="j1", attempt=1, state=JobState.SUCCEEDED, exit_code=0, occurred_at=at(2))
    stopped = JobCompleted(job_id="j1", attempt=2, state=JobState.STOPPED, exit_code=-210, occurred_at=at(3))
    found = events(failed, plain, done, stopped)
    assert [(e["type"], e["reason"], e["message"], e["sourceComponent"]) for e in found] == [
        ("Normal", "Stopped", "Job stopped after attempt 2.", "orchestrator"),
        ("Normal", "Succeeded", "Job succeeded after attempt 1.", "orchestrator"),
        ("Warning", "Failed", "Job failed after attempt 1 with exit code 2.", "orchestrator"),
        (
            "Warning",
            "Failed",
            "Job failed after attempt 3 with exit code 137 (ContainerOOMKilled): oom.",
            "orchestrator",
        ),
    ]


def test_repeats_fold_into_one_event_with_a_count_and_the_last_time() -> None:
    first = JobPending(job_id="j1", reason="waiting for GPUs", occurred_at=at(0))
    other = JobPending(job_id="j1", reason="waiting for memory", occurred_at=at(5))
    again = JobPending(job_id="j1", reason="waiting for GPUs", occurred_at=at(10))
    third = JobPending(job_id="j1", reason="waiting for GPUs", occurred_at=at(20))
    found = events(first, other, again, third)
    assert [(e["uid"], e["message"], e["count"], e["firstTimestamp"], e["lastTimestamp"]) for e in found] == [
        (first.event_id, "waiting for GPUs", 3, "2026-11-01T08:00:00.250Z", "2026-11-01T08:00:20.250Z"),
        (other.event_id, "waiting for memory", 1, "2026-11-01T08:00:05.250Z", "2026-11-01T08:00:05.250Z"),
    ]


def test_events_of_the_same_time_are_newest_in_the_stream_first() -> None:
    a = JobPending(job_id="j1", reason="a", occurred_at=at(0))
    b = JobPending(job_id="j1", reason="b", occurred_at=at(0))
    again = JobPending(job_id="j1", reason="a", occurred_at=at(0))
    assert [e["message"] for e in events(a, b)] == ["b", "a"]
    assert [e["message"] for e in events(a, b, again)] == ["a", "b"], "a repeat moves to its latest place"


def test_facts_that_are_not_lifecycle_show_nothing() -> None:
    assert events(NodeCordoned(node_id="n1", name="n1")) == []
    assert job_events(JOB, []) == []


def test_a_placement_told_again_folds_every_task_of_it() -> None:
    placements = (
        TaskPlacement(role="worker", index=0, node="n1", node_address="10.0.0.1"),
        TaskPlacement(role="worker", index=1, node="n1", node_address="10.0.0.1"),
    )
    first = JobScheduled(job_id="j1", attempt=1, placements=placements, occurred_at=at(0))
    again = JobScheduled(job_id="j1", attempt=1, placements=placements, occurred_at=at(5))
    found = events(first, again)
    assert [(e["taskName"], e["count"], e["lastTimestamp"]) for e in found] == [
        (f"{FRAME}-worker-0", 2, "2026-11-01T08:00:05.250Z"),
        (f"{FRAME}-worker-1", 2, "2026-11-01T08:00:05.250Z"),
    ]
