"""OpenPAI's retryDetails as a job's attempts and a task's retries add up: each kind counted on
its own, a transient failure never counted against the task's limit."""

from __future__ import annotations

from libs.protocol.events import JobCompleted, JobState
from services.orchestrator.core.frameworks import RetryCounters, TaskKey
from tests.orchestrator.sim import World, config, scheduled, submitted, verdict


def test_each_kind_of_job_retry_is_counted_apart() -> None:
    cfg = config({"worker": {"instances": 1}}, jobRetryCount=5)
    world = World()
    world.feed(submitted(cfg))
    kinds = ["unknown", "transient", "transient", "unknown", "permanent"]
    for attempt, kind in enumerate(kinds):
        world.feed(scheduled(cfg, attempt))
        world.exit(TaskKey(attempt, "worker", 0, 0), 3, verdict(kind, 3))
        world.drain()
    assert world.framework is not None
    assert world.framework.retries == RetryCounters(user=2, platform=2, resource=0)
    (done,) = [e for e in world.published if isinstance(e, JobCompleted)]
    assert (done.state, done.exit_code) == (JobState.FAILED, 3)


def test_a_task_s_transient_failures_do_not_use_its_retries() -> None:
    cfg = config({"worker": {"instances": 2, "taskRetryCount": 2}}, extras={"gangAllocation": False})
    world = World()
    world.feed(submitted(cfg))
    world.feed(scheduled(cfg))
    for task_attempt, kind in enumerate(["unknown", "transient", "transient", "unknown"]):
        world.exit(TaskKey(0, "worker", 0, task_attempt), 1, verdict(kind))
        world.drain()
    assert world.framework is not None
    task = world.framework.attempts[0].tasks[0]
    assert [a.task_attempt for a in task.attempts] == [0, 1, 2, 3, 4]
    assert task.counted_retries == 2
    assert TaskKey(0, "worker", 0, 4) in world.running
    world.exit(TaskKey(0, "worker", 0, 4), 0)
    world.exit(TaskKey(0, "worker", 1, 0), 0)
    world.drain()
    assert world.framework.outcome is JobState.SUCCEEDED
