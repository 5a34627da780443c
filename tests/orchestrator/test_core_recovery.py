"""The orchestrator restarted: what the pure deciders do with what the executor found of each task
(alive, ended, never begun), with and without a stop requested while it was down."""

from __future__ import annotations

from datetime import timedelta

from libs.protocol.events import JobScheduled, JobStopRequested, TaskPlacement, TaskStarted
from services.orchestrator.core.effects import (
    AdoptTask,
    Probe,
    Publish,
    Recovered,
    ReportExit,
    StartTask,
    StopTask,
    TaskLaunched,
)
from services.orchestrator.core.frameworks import Framework, TaskAttempt, TaskKey
from services.orchestrator.core.states import AttemptState
from tests.orchestrator.sim import JOB, T0, World, config, decide_untouched, scheduled, submitted

TWO_WORKERS = config({"worker": {"instances": 2}})


def requested() -> tuple[World, list[StartTask]]:
    """Both tasks' starts asked for; the orchestrator stops before it hears of any launch."""
    world = World()
    world.feed(submitted(TWO_WORKERS))
    starts = [e for e in world.feed(scheduled(TWO_WORKERS), apply_effects=False) if isinstance(e, StartTask)]
    assert [s.key.task_index for s in starts] == [0, 1]
    return world, starts


def recover(world: World, probes: dict[TaskKey, Probe]) -> tuple[Framework, list[object]]:
    assert world.framework is not None
    decision = decide_untouched(world.framework, Recovered(JOB, probes), world.ctx())
    assert decision.framework is not None
    return decision.framework, list(decision.effects)


def attempt_of(framework: Framework, key: TaskKey) -> TaskAttempt:
    for attempt in framework.attempts:
        for task in attempt.tasks:
            for ta in task.attempts:
                if (attempt.attempt, task.role, task.index, ta.task_attempt) == tuple(key):
                    return ta
    raise AssertionError(key)


def test_a_task_launched_while_the_orchestrator_was_down_is_adopted_and_announced() -> None:
    world, (first, second) = requested()
    framework, effects = recover(world, {first.key: Probe("alive", 7, "/t/0"), second.key: Probe("absent")})
    started, adopted, again = effects
    assert isinstance(started, Publish)
    assert isinstance(started.event, TaskStarted)
    assert (started.event.index, started.event.pid) == (0, 7)
    assert adopted == AdoptTask(JOB, first.key, 7, "/t/0")
    # The second's launch was asked for and never happened: this is the only start it gets.
    assert again == StartTask(JOB, second.key, second.placement)
    found = attempt_of(framework, first.key)
    assert (found.state, found.pid, found.task_dir) == (AttemptState.RUNNING, 7, "/t/0")
    assert attempt_of(framework, second.key).state is AttemptState.CREATION_REQUESTED


def test_a_running_task_found_alive_is_adopted_in_its_known_folder_without_a_second_announcement() -> None:
    world, (first, second) = requested()
    world.feed(TaskLaunched(JOB, first.key, 50, "/tasks/0"), apply_effects=False)
    world.feed(TaskLaunched(JOB, second.key, 51, "/tasks/1"), apply_effects=False)
    _, effects = recover(world, {first.key: Probe("alive", 50), second.key: Probe("alive", 51, "/moved/1")})
    assert effects == [AdoptTask(JOB, first.key, 50, "/tasks/0"), AdoptTask(JOB, second.key, 51, "/moved/1")]


def test_a_task_that_ended_while_down_is_reported_from_its_folder() -> None:
    world, (first, second) = requested()
    world.feed(TaskLaunched(JOB, second.key, 51, "/tasks/1"), apply_effects=False)
    _, effects = recover(world, {first.key: Probe("ended", None, "/t/0"), second.key: Probe("ended")})
    assert effects == [ReportExit(JOB, first.key, "/t/0"), ReportExit(JOB, second.key, "/tasks/1")]


def test_a_launched_task_whose_process_is_gone_is_reported_not_started_again() -> None:
    world, (first, second) = requested()
    world.feed(TaskLaunched(JOB, first.key, 50, "/tasks/0"), apply_effects=False)
    # "alive" without a pid is no process to adopt either.
    _, effects = recover(world, {first.key: Probe("absent"), second.key: Probe("alive", None, "/t/1")})
    assert effects == [ReportExit(JOB, first.key, "/tasks/0"), StartTask(JOB, second.key, second.placement)]


def test_a_task_the_executor_was_not_asked_about_is_left_alone() -> None:
    world, (first, _) = requested()
    _, effects = recover(world, {first.key: Probe("absent")})
    assert effects == [StartTask(JOB, first.key, first.placement)]
    assert recover(world, {})[1] == []


def test_a_stop_requested_while_down_stops_what_is_alive_and_ends_what_never_began() -> None:
    world, (first, second) = requested()
    world.feed(TaskLaunched(JOB, first.key, 50, "/tasks/0"), apply_effects=False)
    world.feed(JobStopRequested(job_id=JOB, by="alice"), apply_effects=False)
    framework, effects = recover(world, {first.key: Probe("alive", 50), second.key: Probe("absent")})
    assert effects == [
        AdoptTask(JOB, first.key, 50, "/tasks/0"),
        StopTask(JOB, first.key, "stopped by alice", -210),
    ]
    never = attempt_of(framework, second.key)
    assert (never.state, never.exit_code, never.diagnostics) == (
        AttemptState.COMPLETED,
        -210,
        "stopped before it started",
    )
    _, both_alive = recover(world, {first.key: Probe("alive", 50), second.key: Probe("alive", 51, "/d1")})
    assert both_alive == [
        AdoptTask(JOB, first.key, 50, "/tasks/0"),
        StopTask(JOB, first.key, "stopped by alice", -210),
        AdoptTask(JOB, second.key, 51, "/d1"),
        StopTask(JOB, second.key, "stopped by alice", -210),
    ]


def test_task_started_says_where_when_and_what_the_task_runs() -> None:
    world = World()
    world.feed(submitted(TWO_WORKERS))
    placements = tuple(
        TaskPlacement(role="worker", index=i, node=f"node-{i}", node_address=f"10.0.0.{i + 1}")
        for i in range(2)
    )
    starts = world.feed(JobScheduled(job_id=JOB, attempt=0, placements=placements), apply_effects=False)
    assert [s.placement for s in starts if isinstance(s, StartTask)] == list(placements)
    key = TaskKey(0, "worker", 1, 0)
    launched = TaskLaunched(
        JOB,
        key,
        51,
        "/tasks/1",
        {"http": [30001]},
        note="image ubuntu:22.04",
        image_digest="ubuntu@sha256:" + "a" * 64,
    )
    effects = world.feed(launched, apply_effects=False)
    (published,) = [e.event for e in effects if isinstance(e, Publish)]
    assert isinstance(published, TaskStarted)
    assert published.model_dump(exclude={"version"}) == {
        "event_id": f"{JOB}.0.worker.1.0.started",
        "occurred_at": T0 + timedelta(seconds=world.tick),
        "type": "task.started",
        "job_id": JOB,
        "attempt": 0,
        "role": "worker",
        "index": 1,
        "task_attempt": 0,
        "node": "node-1",
        "pid": 51,
        "address": "10.0.0.2",
        "ports": {"http": [30001]},
        "note": "image ubuntu:22.04",
        "image_digest": "ubuntu@sha256:" + "a" * 64,
    }
    assert world.framework is not None
    assert attempt_of(world.framework, key).state is AttemptState.RUNNING


def test_a_launch_heard_after_the_stop_was_sent_is_not_announced() -> None:
    world, (first, _) = requested()
    world.feed(JobStopRequested(job_id=JOB, by="alice"), apply_effects=False)
    assert world.feed(TaskLaunched(JOB, first.key, 50, "/tasks/0"), apply_effects=False) == []
    assert world.framework is not None
    assert attempt_of(world.framework, first.key).state is AttemptState.DELETION_REQUESTED
