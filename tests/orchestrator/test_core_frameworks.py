"""The orchestrator's record of a job: finding a task, the completed tally rebuilt from the tasks
of a state stored before the tally existed, and the inputs remembered to recognise redelivery."""

from __future__ import annotations

from services.orchestrator.core.frameworks import (
    SEEN_LIMIT,
    Framework,
    JobAttempt,
    Task,
    remember,
    task_position,
)
from services.orchestrator.core.policies import RoleCounts
from tests.orchestrator.sim import World, config, scheduled, submitted
from tests.support.jobs import job_model

ROLES = config({"ps": {"instances": 2}, "worker": {"instances": 3}})


def scheduled_job() -> Framework:
    world = World()
    world.feed(submitted(ROLES))
    world.feed(scheduled(ROLES), apply_effects=False)
    assert world.framework is not None
    return world.framework


def test_a_task_is_found_by_role_and_index_with_or_without_the_job_s_spec() -> None:
    framework = scheduled_job()
    attempt = framework.attempts[-1]
    assert [(t.role, t.index) for t in attempt.tasks] == [
        ("ps", 0),
        ("ps", 1),
        ("worker", 0),
        ("worker", 1),
        ("worker", 2),
    ]
    for position, task in enumerate(attempt.tasks):
        assert task_position(framework.spec, attempt, task.role, task.index) == position
        assert task_position(None, attempt, task.role, task.index) == position
        assert attempt.task(task.role, task.index) is task
    for role, index in (("worker", 3), ("ps", -1), ("chief", 0)):
        assert task_position(framework.spec, attempt, role, index) is None
        assert task_position(None, attempt, role, index) is None
        assert attempt.task(role, index) is None
    # Tasks not in the spec's order (a state stored by another version) are still found.
    shuffled = attempt.model_copy(update={"tasks": list(reversed(attempt.tasks))})
    assert task_position(framework.spec, shuffled, "ps", 1) == 3
    assert task_position(framework.spec, shuffled, "worker", 0) == 2
    assert task_position(framework.spec, shuffled.model_copy(update={"tasks": []}), "ps", 0) is None


def test_the_completed_tally_is_rebuilt_from_the_tasks_themselves() -> None:
    attempt = JobAttempt(
        attempt=0,
        tasks=[
            Task(role="ps", index=0, done=True, succeeded=True),
            Task(role="ps", index=1),
            Task(role="worker", index=0, done=True, succeeded=False),
            Task(role="worker", index=1, done=True, succeeded=True),
            Task(role="worker", index=2, done=False, succeeded=True),
        ],
        tally={"chief": RoleCounts(succeeded=9)},
    )
    attempt.recount()
    assert attempt.tally == {"ps": RoleCounts(succeeded=1), "worker": RoleCounts(succeeded=1, failed=1)}
    assert attempt.completed_tasks == 3


def test_the_last_inputs_are_remembered_and_older_ones_forgotten() -> None:
    framework = Framework(job_id="j", config=job_model())
    for n in range(SEEN_LIMIT):
        remember(framework, f"input-{n}")
    assert len(framework.seen) == SEEN_LIMIT
    assert framework.seen[0] == "input-0"
    for n in range(SEEN_LIMIT, SEEN_LIMIT + 10):
        remember(framework, f"input-{n}")
    assert framework.seen == [f"input-{n}" for n in range(10, SEEN_LIMIT + 10)]
