"""OpenPAI's retryDetails as a job's attempts and a task's retries add up: each kind counted on
its own, a transient failure never counted against the task's limit."""

from __future__ import annotations

from libs.protocol.events import JobCompleted, JobPreempting, JobState
from services.orchestrator.core.effects import StopTask
from services.orchestrator.core.frameworks import RetryCounters, TaskKey
from services.orchestrator.core.policies import PREEMPTED_EXIT_CODE
from tests.orchestrator.sim import JOB, World, config, scheduled, submitted, verdict


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


def test_each_preemption_stops_the_tasks_as_preempted_and_counts_a_resource_retry() -> None:
    cfg = config({"worker": {"instances": 2}}, jobRetryCount=0)
    world = World()
    world.feed(submitted(cfg))
    for attempt in range(2):
        world.feed(scheduled(cfg, attempt))
        effects = world.feed(
            JobPreempting(job_id=JOB, by_job_id="vip", reason="higher priority"), apply_effects=False
        )
        framework = world.framework
        assert framework is not None
        assert framework.preempting is True
        stops = [e for e in effects if isinstance(e, StopTask)]
        assert stops == [
            StopTask(JOB, TaskKey(attempt, "worker", index, 0), stops[0].reason, PREEMPTED_EXIT_CODE)
            for index in range(2)
        ]
        assert stops[0].reason
        world.apply(effects)
        world.drain()
        after = world.framework
        assert after is not None
        assert (after.preempting, after.job_state()) == (False, JobState.WAITING)
        assert after.retries == RetryCounters(user=0, platform=0, resource=attempt + 1)


def test_a_role_reaching_its_threshold_stops_the_others_with_the_attempt_s_reason() -> None:
    cfg = config(
        {"master": {"instances": 1, "completion": {"minSucceededInstances": 1}}, "worker": {"instances": 2}}
    )
    world = World()
    world.feed(submitted(cfg))
    world.feed(scheduled(cfg))
    world.exit(TaskKey(0, "master", 0, 0), 0)
    effects = world.feed(world.bus.pop(0), apply_effects=False)
    stops = [e for e in effects if isinstance(e, StopTask)]
    assert world.framework is not None
    reason = world.framework.attempts[0].diagnostics
    assert reason == "1 task(s) of role master succeeded, reaching minSucceededInstances 1"
    assert stops == [StopTask(JOB, TaskKey(0, "worker", i, 0), reason, PREEMPTED_EXIT_CODE) for i in range(2)]
