"""Inputs folded in a batch (``decide_all``): a job is known from its submission, recorded once;
a redelivered event changes nothing, and neither stops the inputs after it."""

from __future__ import annotations

from datetime import timedelta

from libs.protocol.events import JobCompleted, JobState, JobStopRequested, JobSubmitted
from libs.protocol.jobs import JobConfig
from services.orchestrator.core.deciders import decide_all
from services.orchestrator.core.effects import Context, Publish, StartTask
from services.orchestrator.core.frameworks import TaskKey
from services.orchestrator.core.states import AttemptState
from tests.orchestrator.sim import JOB, T0, completed, config, scheduled, submitted
from tests.support.jobs import job_model

ROLES = config({"worker": {"instances": 2}})
CTX = Context(now=T0 + timedelta(seconds=5), random=0.25)


def test_a_job_is_recorded_from_its_submission_with_its_time_and_only_once() -> None:
    first = submitted(ROLES)
    again = JobSubmitted(
        job_id=JOB, user="mallory", name="other", virtual_cluster="x", config=job_model(ROLES)
    )
    decision = decide_all(None, [(first, CTX), (again, CTX), (scheduled(ROLES), CTX)])
    framework = decision.framework
    assert framework is not None
    assert (framework.user, framework.name, framework.submitted_at) == ("alice", "j", first.occurred_at)
    # The second submission was skipped, and the scheduling after it still folded in.
    assert [type(e) for e in decision.effects] == [StartTask, StartTask]
    assert framework.seen[0] == first.event_id


def test_inputs_before_the_submission_change_nothing_and_do_not_stop_the_rest() -> None:
    decision = decide_all(None, [(scheduled(ROLES), CTX), (submitted(ROLES), CTX), (scheduled(ROLES), CTX)])
    assert decision.framework is not None
    assert len([e for e in decision.effects if isinstance(e, StartTask)]) == 2


def test_a_redelivered_event_is_skipped_and_the_next_one_still_folds_in() -> None:
    start = decide_all(None, [(submitted(ROLES), CTX), (scheduled(ROLES), CTX)])
    first, second = TaskKey(0, "worker", 0, 0), TaskKey(0, "worker", 1, 0)
    done = completed(first, 0)
    once = decide_all(start.framework, [(done, CTX)])
    twice = decide_all(once.framework, [(done, CTX), (completed(second, 0), CTX)])
    assert twice.framework is not None
    attempt = twice.framework.attempts[-1]
    assert attempt.completed_tasks == 2
    assert twice.framework.state is AttemptState.COMPLETED


def test_a_job_with_no_task_succeeds_as_soon_as_it_is_scheduled() -> None:
    # The protocol refuses a job without task roles; one that got this far still ends.
    empty = JobConfig.model_construct(protocol_version=2, name="j", type="job", task_roles={})
    decision = decide_all(None, [(submitted(empty), CTX), (scheduled(empty), CTX)])
    assert decision.framework is not None
    assert decision.framework.outcome is JobState.SUCCEEDED
    (done,) = [
        e.event for e in decision.effects if isinstance(e, Publish) and isinstance(e.event, JobCompleted)
    ]
    assert (done.state, done.exit_code, done.diagnostics) == (JobState.SUCCEEDED, 0, "the job has no task")


def test_a_placement_for_another_attempt_or_a_stopped_job_starts_nothing() -> None:
    start = decide_all(None, [(submitted(ROLES), CTX)])
    assert decide_all(start.framework, [(scheduled(ROLES, attempt=1), CTX)]).effects == []
    stop = JobStopRequested(job_id=JOB, by="alice")
    stopped = decide_all(start.framework, [(stop, CTX), (scheduled(ROLES), CTX)])
    assert not [e for e in stopped.effects if isinstance(e, StartTask)]
    once = decide_all(start.framework, [(scheduled(ROLES), CTX)])
    assert decide_all(once.framework, [(scheduled(ROLES), CTX)]).effects == []
