"""The attempt state table: every move it allows, the moves it refuses, and OpenPAI's view."""

from __future__ import annotations

import pytest

from libs.protocol.events import JobState
from services.orchestrator.core.states import (
    TRANSITIONS,
    AttemptState,
    InvalidTransition,
    Trigger,
    openpai_state,
    openpai_task_state,
    transition,
    walk,
)

S = AttemptState
T = Trigger


@pytest.mark.parametrize(
    ("start", "triggers", "end"),
    [
        pytest.param(
            S.CREATION_PENDING, [T.REQUEST_CREATION, T.LAUNCHED, T.STARTED], S.RUNNING, id="start-to-run"
        ),
        pytest.param(S.RUNNING, [T.EXITED, T.COMPLETE], S.COMPLETED, id="run-to-completion"),
        pytest.param(S.RUNNING, [T.EXITED, T.RETRY], S.CREATION_PENDING, id="run-then-retry"),
        pytest.param(
            S.RUNNING,
            [T.DECIDE_END, T.REQUEST_DELETION, T.DELETING, T.EXITED, T.COMPLETE],
            S.COMPLETED,
            id="stopped-while-running",
        ),
        pytest.param(
            S.CREATION_PENDING,
            [T.DECIDE_END, T.REQUEST_DELETION, T.EXITED],
            S.ATTEMPT_COMPLETED,
            id="stop-waiting",
        ),
        pytest.param(S.CREATION_REQUESTED, [T.EXITED], S.ATTEMPT_COMPLETED, id="process-died-at-launch"),
    ],
)
def test_paths_through_the_table_end_where_framework_controller_ends(
    start: AttemptState, triggers: list[Trigger], end: AttemptState
) -> None:
    assert walk(start, *triggers) is end


@pytest.mark.parametrize(
    ("state", "trigger"),
    [
        (S.COMPLETED, T.REQUEST_CREATION),
        (S.COMPLETED, T.DECIDE_END),
        (S.COMPLETED, T.RETRY),
        (S.RUNNING, T.REQUEST_CREATION),
        (S.DELETION_PENDING, T.DECIDE_END),
        (S.CREATION_PENDING, T.EXITED),
        (S.ATTEMPT_COMPLETED, T.EXITED),
    ],
    ids=lambda v: str(v.value) if hasattr(v, "value") else str(v),
)
def test_moves_outside_the_table_are_refused(state: AttemptState, trigger: Trigger) -> None:
    with pytest.raises(InvalidTransition, match=state.value):
        transition(state, trigger)


def test_completed_is_the_only_state_without_a_way_out() -> None:
    sources = {state for state, _ in TRANSITIONS}
    assert set(AttemptState) - sources == {S.COMPLETED}


def test_every_state_is_reachable_from_creation_pending() -> None:
    seen = {S.CREATION_PENDING}
    frontier = [S.CREATION_PENDING]
    while frontier:
        state = frontier.pop()
        for (source, _), target in TRANSITIONS.items():
            if source is state and target not in seen:
                seen.add(target)
                frontier.append(target)
    assert seen == set(AttemptState)


@pytest.mark.parametrize(
    ("state", "stopping", "outcome", "expected"),
    [
        (S.CREATION_PENDING, False, None, JobState.WAITING),
        (S.CREATION_REQUESTED, False, None, JobState.WAITING),
        (S.PREPARING, False, None, JobState.WAITING),
        (S.RUNNING, False, None, JobState.RUNNING),
        (S.DELETION_PENDING, False, None, JobState.RUNNING),
        (S.DELETION_REQUESTED, True, None, JobState.STOPPING),
        (S.DELETING, True, None, JobState.STOPPING),
        (S.COMPLETED, True, JobState.STOPPED, JobState.STOPPED),
        (S.COMPLETED, False, JobState.SUCCEEDED, JobState.SUCCEEDED),
        (S.COMPLETED, False, JobState.FAILED, JobState.FAILED),
    ],
)
def test_openpai_state_follows_the_attempt_state(
    state: AttemptState, stopping: bool, outcome: JobState | None, expected: JobState
) -> None:
    assert openpai_state(state, stopping=stopping, outcome=outcome) is expected


def test_an_attempt_completed_with_a_retry_ahead_reads_waiting() -> None:
    assert openpai_state(S.ATTEMPT_COMPLETED, stopping=False, outcome=None, retrying=True) is JobState.WAITING


@pytest.mark.parametrize(
    ("state", "exit_code", "expected"),
    [
        (S.CREATION_REQUESTED, None, JobState.WAITING),
        (S.RUNNING, None, JobState.RUNNING),
        (S.DELETION_REQUESTED, None, JobState.STOPPING),
        (S.ATTEMPT_COMPLETED, 0, JobState.SUCCEEDED),
        (S.COMPLETED, 1, JobState.FAILED),
        (S.COMPLETED, -210, JobState.STOPPED),
    ],
)
def test_task_states_read_as_openpai_reports_them(
    state: AttemptState, exit_code: int | None, expected: JobState
) -> None:
    assert openpai_task_state(state, exit_code) is expected


def test_an_attempt_completed_without_a_retry_ahead_still_reads_running() -> None:
    assert openpai_state(S.ATTEMPT_COMPLETED, stopping=False, outcome=None) is JobState.RUNNING
    assert openpai_state(S.RUNNING, stopping=False, outcome=None, retrying=True) is JobState.RUNNING


def test_a_completed_attempt_without_its_outcome_is_a_bug_said_plainly() -> None:
    with pytest.raises(ValueError, match=r"^a Completed attempt needs its outcome$"):
        openpai_state(S.COMPLETED, stopping=False, outcome=None)


def test_a_refused_move_names_its_state_and_trigger() -> None:
    with pytest.raises(InvalidTransition) as caught:
        transition(S.COMPLETED, T.EXITED)
    assert (caught.value.state, caught.value.trigger) == (S.COMPLETED, T.EXITED)
    assert str(caught.value) == f"no transition from {S.COMPLETED.value} on {T.EXITED.value}"
