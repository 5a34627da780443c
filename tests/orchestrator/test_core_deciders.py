"""Whole job lives through the pure deciders: completion, retries, stops, preemption, history."""

from __future__ import annotations

from typing import Any

import pytest

from libs.protocol.events import (
    JobCompleted,
    JobPreempting,
    JobRetrying,
    JobState,
    JobStopRequested,
    TaskStarted,
)
from services.orchestrator.core.effects import StartTask, StopTask, TaskLaunched
from services.orchestrator.core.frameworks import TaskKey
from services.orchestrator.core.states import AttemptState
from tests.orchestrator.sim import JOB, World, config, scheduled, submitted, verdict

MASTER_WORKERS = config(
    {
        "master": {"instances": 1, "completion": {"minSucceededInstances": 1}},
        "worker": {"instances": 2, "completion": {"minFailedInstances": -1}},
    }
)


def started(cfg: dict[str, Any], attempt: int = 0, world: World | None = None) -> World:
    world = world or World()
    if world.framework is None:
        world.feed(submitted(cfg))
    world.feed(scheduled(cfg, attempt))
    return world


def final(world: World) -> JobCompleted:
    events = [e for e in world.published if isinstance(e, JobCompleted)]
    assert len(events) == 1, world.types()
    return events[0]


def test_master_success_ends_the_job_after_the_workers_are_stopped() -> None:
    world = started(MASTER_WORKERS)
    assert len(world.running) == 3
    assert world.framework is not None
    assert world.framework.job_state() is JobState.RUNNING
    world.exit(TaskKey(0, "master", 0, 0), 0)
    world.feed(world.bus.pop(0))
    # The workers were asked to stop; the job waits for them before it completes.
    assert world.running == {}
    assert "job.completed" not in world.types()
    world.drain()
    done = final(world)
    assert (done.state, done.exit_code, done.trigger_role, done.trigger_index) == (
        JobState.SUCCEEDED,
        0,
        "master",
        0,
    )
    assert world.framework.state is AttemptState.COMPLETED


def test_any_worker_success_completes_the_job() -> None:
    cfg = config({"worker": {"instances": 3, "completion": {"minSucceededInstances": 1}}})
    world = started(cfg)
    world.exit(TaskKey(0, "worker", 1, 0), 0)
    world.drain()
    assert final(world).state is JobState.SUCCEEDED
    assert world.running == {}


def test_all_workers_job_fails_with_the_first_failed_task_exit_code() -> None:
    world = started(config({"worker": {"instances": 3}}))
    world.exit(TaskKey(0, "worker", 0, 0), 0)
    world.drain()
    assert "job.completed" not in world.types()
    world.exit(TaskKey(0, "worker", 2, 0), 3, verdict("permanent", 3))
    world.drain()
    done = final(world)
    assert (done.state, done.exit_code, done.trigger_role, done.trigger_index) == (
        JobState.FAILED,
        3,
        "worker",
        2,
    )
    assert done.failure is not None
    assert done.failure.type == "permanent"


def test_every_task_start_is_published_with_its_pid() -> None:
    world = started(config({"worker": {"instances": 2}}))
    starts = [e for e in world.published if isinstance(e, TaskStarted)]
    assert sorted((e.role, e.index, e.pid) for e in starts) == sorted(
        (key[1], key[2], pid) for key, pid in world.running.items()
    )
    assert {e.address for e in starts} == {"127.0.0.1"}


def test_a_task_start_carries_the_ports_its_spec_reserved() -> None:
    cfg = config({"worker": {"instances": 1}})
    world = World()
    world.feed(submitted(cfg))
    world.feed(scheduled(cfg), apply_effects=False)
    ports = {"ssh": [20001], "http": [20002, 20003]}
    world.feed(TaskLaunched(JOB, TaskKey(0, "worker", 0, 0), 4242, "/tasks/w0", ports))
    start = next(e for e in world.published if isinstance(e, TaskStarted))
    assert (start.pid, start.address, start.ports) == (4242, "127.0.0.1", ports)


@pytest.mark.parametrize(
    ("kind", "retry_count", "expected"),
    [
        pytest.param("unknown", 1, ["retry-user-counted", "FAILED"], id="unknown-counted-once"),
        pytest.param("permanent", 5, ["FAILED"], id="permanent-never-retried"),
        pytest.param(
            "transient", 0, ["retry-platform", "retry-platform", "FAILED"], id="transient-uncounted"
        ),
    ],
)
def test_job_retries_follow_the_failure_verdict(kind: str, retry_count: int, expected: list[str]) -> None:
    cfg = config({"worker": {"instances": 1}}, jobRetryCount=retry_count)
    world = started(cfg)
    outcome: list[str] = []
    for attempt in range(len(expected)):
        if attempt:
            world.feed(scheduled(cfg, attempt))
        # The last failure in a transient row is permanent so the job ends.
        this_kind = kind if attempt < len(expected) - 1 or kind != "transient" else "permanent"
        world.exit(TaskKey(attempt, "worker", 0, 0), 1, verdict(this_kind))
        world.drain()
        last = world.published[-1]
        if isinstance(last, JobRetrying):
            outcome.append(f"retry-{last.kind}" + ("-counted" if last.counted else ""))
            assert last.next_attempt == attempt + 1
            # What OpenPAI's attempt history shows of the attempt that just ended.
            assert (last.exit_code, last.failure, last.trigger_role, last.trigger_index) == (
                1,
                verdict(this_kind),
                "worker",
                0,
            )
        else:
            assert isinstance(last, JobCompleted)
            outcome.append(last.state.value)
    assert outcome == expected
    assert world.framework is not None
    assert [a.attempt for a in world.framework.attempts] == list(range(len(expected)))
    assert all(a.tasks[0].current.exit_code == 1 for a in world.framework.attempts)


def test_conflict_failures_retry_after_a_random_delay_in_the_resource_bucket() -> None:
    cfg = config({"worker": {"instances": 1}})
    world = started(cfg)
    world.exit(TaskKey(0, "worker", 0, 0), 251, verdict("transient", 251))
    world.drain()
    retry = world.published[-1]
    assert isinstance(retry, JobRetrying)
    assert (retry.kind, retry.counted) == ("resource", False)
    assert retry.delay_seconds > 0
    assert world.framework is not None
    assert world.framework.retries.resource == 1


def test_without_gang_allocation_a_failed_task_is_retried_alone() -> None:
    cfg = config({"worker": {"instances": 2, "taskRetryCount": 1}}, extras={"gangAllocation": False})
    world = started(cfg)
    other = world.running[TaskKey(0, "worker", 1, 0)]
    world.exit(TaskKey(0, "worker", 0, 0), 1, verdict("unknown"))
    world.drain()
    assert (0, "worker", 0, 1) in world.running
    assert world.running[TaskKey(0, "worker", 1, 0)] == other
    world.exit(TaskKey(0, "worker", 0, 1), 1, verdict("unknown"))
    world.drain()
    assert final(world).state is JobState.FAILED
    task = world.framework.attempts[0].tasks[0]  # type: ignore[union-attr]
    assert [a.task_attempt for a in task.attempts] == [0, 1]
    assert task.counted_retries == 1


def stop() -> JobStopRequested:
    return JobStopRequested(job_id=JOB, by="alice")


def _waiting(world: World) -> None:
    world.feed(submitted(MASTER_WORKERS))


def _launch_requested(world: World) -> None:
    _waiting(world)
    # Effects not applied: the launches are intended but no process exists yet.
    world.feed(scheduled(MASTER_WORKERS), apply_effects=False)


def _running(world: World) -> None:
    started(MASTER_WORKERS, world=world)


def _ending(world: World) -> None:
    _running(world)
    world.exit(TaskKey(0, "master", 0, 0), 0)
    world.feed(world.bus.pop(0))


def _retrying(world: World) -> None:
    cfg = MASTER_WORKERS
    world.feed(submitted({**cfg, "jobRetryCount": 1}))
    world.feed(scheduled(cfg))
    world.exit(TaskKey(0, "master", 0, 0), 1, verdict("unknown"))
    world.drain()


@pytest.mark.parametrize(
    "reach",
    [_waiting, _launch_requested, _running, _ending, _retrying],
    ids=["waiting", "launch-requested", "running", "ending", "waiting-for-retry"],
)
def test_stop_from_every_state_ends_stopped_with_exit_code_minus_210(reach: Any) -> None:
    world = World()
    reach(world)
    world.feed(stop())
    assert world.framework is not None
    assert world.framework.job_state() in (JobState.STOPPING, JobState.STOPPED)
    world.drain()
    done = final(world)
    assert (done.state, done.exit_code) == (JobState.STOPPED, -210)
    assert world.running == {}
    before = world.framework.model_dump()
    assert world.feed(stop()) == []
    assert world.framework.model_dump()["outbox"] == before["outbox"]
    assert world.framework.job_state() is JobState.STOPPED


def test_stop_after_completion_changes_nothing() -> None:
    world = started(config({"worker": {"instances": 1}}))
    world.exit(TaskKey(0, "worker", 0, 0), 0)
    world.drain()
    assert world.feed(stop()) == []
    assert final(world).state is JobState.SUCCEEDED


def test_preemption_stops_the_tasks_then_retries_uncounted_as_resource() -> None:
    cfg = config({"worker": {"instances": 2}}, jobRetryCount=0)
    world = started(cfg)
    effects = world.feed(JobPreempting(job_id=JOB, by_job_id="vip", reason="higher priority"))
    assert sorted(e.key for e in effects if isinstance(e, StopTask)) == [
        (0, "worker", 0, 0),
        (0, "worker", 1, 0),
    ]
    world.drain()
    retry = world.published[-1]
    assert isinstance(retry, JobRetrying)
    assert (retry.kind, retry.counted, retry.next_attempt) == ("resource", False, 1)
    assert world.framework is not None
    assert world.framework.job_state() is JobState.WAITING
    effects = world.feed(scheduled(cfg, 1))
    assert sum(isinstance(e, StartTask) for e in effects) == 2


def test_redelivered_and_stale_events_change_nothing() -> None:
    cfg = config({"worker": {"instances": 1}})
    world = started(cfg)
    assert world.feed(scheduled(cfg)) == []  # the same placement again
    assert world.feed(submitted(cfg)) == []
    world.exit(TaskKey(0, "worker", 0, 0), 0)
    message = world.bus[0]
    world.drain()
    snapshot = world.framework
    assert world.feed(message) == []
    assert world.framework == snapshot
    assert world.types().count("job.completed") == 1


def test_history_keeps_every_attempt_with_its_times_and_trigger() -> None:
    cfg = config({"worker": {"instances": 1}}, jobRetryCount=1)
    world = started(cfg)
    world.exit(TaskKey(0, "worker", 0, 0), 1, verdict("unknown"))
    world.drain()
    world.feed(scheduled(cfg, 1))
    world.exit(TaskKey(1, "worker", 0, 0), 0)
    world.drain()
    fw = world.framework
    assert fw is not None
    first, second = fw.attempts
    assert (first.ending, first.exit_code, first.trigger_role, first.trigger_index) == (
        "failed",
        1,
        "worker",
        0,
    )
    assert first.state is AttemptState.ATTEMPT_COMPLETED
    assert second.state is AttemptState.COMPLETED
    assert first.scheduled_at
    assert first.running_at
    assert first.completed_at
    assert first.running_at < first.completed_at < second.completed_at  # type: ignore[operator]
    assert fw.retries.user == 1
    assert fw.outcome is JobState.SUCCEEDED


def test_decisions_never_modify_the_snapshot_they_are_given() -> None:
    cfg = config(
        {"worker": {"instances": 2, "taskRetryCount": 1}}, jobRetryCount=1, extras={"gangAllocation": False}
    )
    world = World()
    inputs: list[Any] = [submitted(cfg), scheduled(cfg)]
    for message in inputs:
        world.feed(message)
    world.exit(TaskKey(0, "worker", 0, 0), 1, verdict("unknown"))
    world.exit(TaskKey(0, "worker", 1, 0), 0)
    while world.bus:
        before = world.framework
        assert before is not None
        frozen = before.model_dump()
        world.feed(world.bus.pop(0))
        assert before.model_dump() == frozen
        assert world.framework is not before
