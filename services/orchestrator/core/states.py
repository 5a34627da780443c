"""The attempt state machine: every state a job or task attempt can be in, and every move.

Jobs and tasks follow FrameworkController's nine attempt states. An attempt is created
(CreationPending -> CreationRequested), its process starts (Preparing -> Running), it is
stopped or ends (DeletionPending -> DeletionRequested -> Deleting -> AttemptCompleted), and then
either a new attempt begins (back to CreationPending) or the whole thing is Completed. This
module owns every transition: the deciders never assign a state directly, they ask
`transition(state, trigger)`, so an impossible move is a bug caught at the point it is made.

It also maps the attempt state to what OpenPAI's REST API reports (JobState plus subState).
"""

from __future__ import annotations

from enum import StrEnum

from libs.protocol.events import JobState


class AttemptState(StrEnum):
    CREATION_PENDING = "AttemptCreationPending"
    CREATION_REQUESTED = "AttemptCreationRequested"
    PREPARING = "AttemptPreparing"
    RUNNING = "AttemptRunning"
    DELETION_PENDING = "AttemptDeletionPending"
    DELETION_REQUESTED = "AttemptDeletionRequested"
    DELETING = "AttemptDeleting"
    ATTEMPT_COMPLETED = "AttemptCompleted"
    COMPLETED = "Completed"


class Trigger(StrEnum):
    """Why an attempt moves; the table below says from where each trigger may fire."""

    REQUEST_CREATION = "request_creation"  # placement known: start the process(es)
    LAUNCHED = "launched"  # a process exists; the runtime prepares the task
    STARTED = "started"  # the user's work runs
    DECIDE_END = "decide_end"  # a policy, a stop or a preemption ends the attempt
    REQUEST_DELETION = "request_deletion"  # stop signals sent
    DELETING = "deleting"  # processes are being killed
    EXITED = "exited"  # every process of the attempt is gone
    RETRY = "retry"  # a new attempt of the same job or task begins
    COMPLETE = "complete"  # no attempt follows


S = AttemptState
T = Trigger

_LIVE = (S.CREATION_PENDING, S.CREATION_REQUESTED, S.PREPARING, S.RUNNING)

TRANSITIONS: dict[tuple[AttemptState, Trigger], AttemptState] = {
    (S.CREATION_PENDING, T.REQUEST_CREATION): S.CREATION_REQUESTED,
    (S.CREATION_REQUESTED, T.LAUNCHED): S.PREPARING,
    (S.PREPARING, T.STARTED): S.RUNNING,
    **{(state, T.DECIDE_END): S.DELETION_PENDING for state in _LIVE},
    (S.DELETION_PENDING, T.REQUEST_DELETION): S.DELETION_REQUESTED,
    (S.DELETION_REQUESTED, T.DELETING): S.DELETING,
    # A process may end on its own while it runs, or after being asked to stop.
    (S.CREATION_REQUESTED, T.EXITED): S.ATTEMPT_COMPLETED,
    (S.PREPARING, T.EXITED): S.ATTEMPT_COMPLETED,
    (S.RUNNING, T.EXITED): S.ATTEMPT_COMPLETED,
    (S.DELETION_PENDING, T.EXITED): S.ATTEMPT_COMPLETED,
    (S.DELETION_REQUESTED, T.EXITED): S.ATTEMPT_COMPLETED,
    (S.DELETING, T.EXITED): S.ATTEMPT_COMPLETED,
    (S.ATTEMPT_COMPLETED, T.RETRY): S.CREATION_PENDING,
    (S.ATTEMPT_COMPLETED, T.COMPLETE): S.COMPLETED,
}


class InvalidTransition(Exception):
    """A decider asked for a move the state machine does not have: a bug, never user input."""

    def __init__(self, state: AttemptState, trigger: Trigger) -> None:
        super().__init__(f"no transition from {state.value} on {trigger.value}")
        self.state = state
        self.trigger = trigger


def transition(state: AttemptState, trigger: Trigger) -> AttemptState:
    try:
        return TRANSITIONS[(state, trigger)]
    except KeyError:
        raise InvalidTransition(state, trigger) from None


def walk(state: AttemptState, *triggers: Trigger) -> AttemptState:
    """Apply several triggers in order (e.g. launched then started in one observation)."""
    for trigger in triggers:
        state = transition(state, trigger)
    return state


LIVE_STATES = frozenset(_LIVE)
ENDING_STATES = frozenset({S.DELETION_PENDING, S.DELETION_REQUESTED, S.DELETING})
# States in which a process may exist (or be about to exist) for a task attempt.
PROCESS_STATES = frozenset({S.CREATION_REQUESTED, S.PREPARING, S.RUNNING, *ENDING_STATES})


def openpai_state(
    state: AttemptState, *, stopping: bool, outcome: JobState | None, retrying: bool = False
) -> JobState:
    """OpenPAI's job state for a framework attempt state.

    `stopping` is true once a user asked to stop; `outcome` is the final state once Completed.
    Like OpenPAI, an attempt that is winding down for a policy decision still reads RUNNING,
    and an attempt that ended with a retry ahead reads WAITING.
    """
    if state is S.COMPLETED:
        if outcome is None:
            raise ValueError("a Completed attempt needs its outcome")
        return outcome
    if stopping:
        return JobState.STOPPING
    if state in (S.CREATION_PENDING, S.CREATION_REQUESTED, S.PREPARING):
        return JobState.WAITING
    if state is S.ATTEMPT_COMPLETED and retrying:
        return JobState.WAITING
    return JobState.RUNNING


def openpai_task_state(state: AttemptState, exit_code: int | None) -> JobState:
    """OpenPAI's state of one task attempt (its subState is the attempt state's own name)."""
    if state in (S.CREATION_PENDING, S.CREATION_REQUESTED, S.PREPARING):
        return JobState.WAITING
    if state is S.RUNNING:
        return JobState.RUNNING
    if state in ENDING_STATES:
        return JobState.STOPPING
    if exit_code == 0:
        return JobState.SUCCEEDED
    # -210: stopped by a user; a task that never started because its attempt ended also reads so.
    return JobState.STOPPED if exit_code == -210 else JobState.FAILED
