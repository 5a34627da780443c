"""The framework state of one job: its attempts, their tasks, every task attempt, and history.

This is the snapshot the deciders fold events into and the value stored per job in KV
(`PAI_FRAMEWORKS`). Nothing is ever dropped: every job attempt and every task attempt stays,
with its exit code, failure verdict, diagnostics and times, so attempt history can be served
from it or rebuilt from the events it produced.

`outbox` holds events decided but not yet confirmed published; storing them with the state in
one write is what makes a decision survive a crash between "state written" and "event sent".
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_serializer

from libs.protocol.events import FailureInfo, JobState, TaskPlacement
from libs.protocol.jobs import JobConfig, kept_json
from services.orchestrator.core.policies import JobSpec, RoleCounts
from services.orchestrator.core.states import PROCESS_STATES, AttemptState, openpai_state


class TaskKey(NamedTuple):
    """One process the executor may run, named as the read model's task rows are. A tuple
    still: it unpacks, compares, hashes and serialises as the plain tuple it was."""

    job_attempt: int
    role: str
    task_index: int
    task_attempt: int


class _Mutable(BaseModel):
    # Deciders copy the snapshot first and then edit the copy, so the models are not frozen.
    model_config = ConfigDict(extra="forbid", validate_assignment=False)


class TaskAttempt(_Mutable):
    task_attempt: int
    state: AttemptState = AttemptState.CREATION_PENDING
    pid: int | None = None
    task_dir: str | None = None
    launched_at: datetime | None = None
    completed_at: datetime | None = None
    exit_code: int | None = None
    failure: FailureInfo | None = None
    diagnostics: str = ""


class Task(_Mutable):
    role: str
    index: int
    placement: TaskPlacement | None = None
    attempts: list[TaskAttempt] = Field(default_factory=list)
    counted_retries: int = 0
    done: bool = False
    succeeded: bool = False

    @property
    def current(self) -> TaskAttempt:
        return self.attempts[-1]


Ending = Literal["succeeded", "failed", "stopped", "preempted"]


class JobAttempt(_Mutable):
    attempt: int
    state: AttemptState = AttemptState.CREATION_PENDING
    tasks: list[Task] = Field(default_factory=list)
    scheduled_at: datetime | None = None
    running_at: datetime | None = None
    completed_at: datetime | None = None
    ending: Ending | None = None
    exit_code: int | None = None
    failure: FailureInfo | None = None
    diagnostics: str = ""
    trigger_role: str | None = None
    trigger_index: int | None = None
    tally: dict[str, RoleCounts] = Field(default_factory=dict)
    """The completed tasks of each role, succeeded and failed, kept as tasks complete so a
    completion costs the same in a job of ten tasks or ten thousand."""

    def task(self, role: str, index: int) -> Task | None:
        for task in self.tasks:
            if task.role == role and task.index == index:
                return task
        return None

    @property
    def completed_tasks(self) -> int:
        return sum(c.succeeded + c.failed for c in self.tally.values())

    def count_completed(self, role: str, *, succeeded: bool) -> None:
        self.tally[role] = self.tally.get(role, RoleCounts()).plus(succeeded=succeeded)

    def recount(self) -> None:
        """The tally from the tasks themselves (a state stored before the tally existed)."""
        self.tally = {}
        for task in self.tasks:
            if task.done:
                self.count_completed(task.role, succeeded=task.succeeded)


class RetryCounters(_Mutable):
    """OpenPAI's retryDetails: user (counted), platform (transient) and resource retries."""

    user: int = 0
    platform: int = 0
    resource: int = 0

    @property
    def total(self) -> int:
        return self.user + self.platform + self.resource


class Framework(_Mutable):
    job_id: str
    user: str = ""
    name: str = ""
    virtual_cluster: str = "default"
    config: JobConfig
    """The job as job.submitted carried it (secrets masked); stored as its protocol JSON."""
    storages: list[dict[str, Any]] = Field(default_factory=list)
    """The storages the job may mount (job.submitted's storages), as the runtime's StorageSpec."""
    spec: JobSpec | None = None
    submitted_at: datetime | None = None
    state: AttemptState = AttemptState.CREATION_PENDING
    attempts: list[JobAttempt] = Field(default_factory=list)
    stop_requested: bool = False
    preempting: bool = False
    retries: RetryCounters = Field(default_factory=RetryCounters)
    outcome: JobState | None = None
    completed_at: datetime | None = None
    outbox: list[dict[str, Any]] = Field(default_factory=list)
    seen: list[str] = Field(default_factory=list)
    """Ids of the last handled inputs, so a redelivered message is recognised at once."""

    @field_serializer("config")
    def _config_json(self, config: JobConfig) -> dict[str, Any]:
        return kept_json(config)

    @property
    def current(self) -> JobAttempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def next_attempt(self) -> int:
        return self.attempts[-1].attempt + 1 if self.attempts else 0

    def job_state(self) -> JobState:
        return openpai_state(self.state, stopping=self.stop_requested, outcome=self.outcome)

    def running_keys(self) -> list[TaskKey]:
        """Every task attempt whose process may exist (launch intended or observed)."""
        keys: list[TaskKey] = []
        for attempt in self.attempts:
            for task in attempt.tasks:
                for ta in task.attempts:
                    if ta.state in PROCESS_STATES:
                        keys.append(TaskKey(attempt.attempt, task.role, task.index, ta.task_attempt))
        return keys


SEEN_LIMIT = 256


def working_copy(framework: Framework) -> Framework:
    """A copy the deciders may edit without touching the original.

    The framework, each attempt and the lists a decision can grow are copied; the tasks are
    shared until a decider takes one to edit (`editable_task`), which copies that task alone.
    A decision therefore costs what it touches, not the size of the job: copying every task of
    a thousand-task job for each of its two thousand decisions was most of their time.
    """
    attempts = [
        attempt.model_copy(update={"tasks": list(attempt.tasks), "tally": dict(attempt.tally)})
        for attempt in framework.attempts
    ]
    return framework.model_copy(
        update={
            "attempts": attempts,
            "outbox": list(framework.outbox),
            "seen": list(framework.seen),
            "retries": framework.retries.model_copy(),
        }
    )


def editable_task(attempt: JobAttempt, position: int, owned: dict[int, tuple[int, int]]) -> Task:
    """The task at `position` of a working copy's attempt, copied first unless `owned` has it.

    `owned` holds the ids of the tasks this decision created or already copied; it lives as long
    as the decision, while the working copy holds those tasks, so an id cannot be reused.
    """
    task = attempt.tasks[position]
    if id(task) not in owned:
        task = task.model_copy(update={"attempts": [ta.model_copy() for ta in task.attempts]})
        attempt.tasks[position] = task
        owned[id(task)] = (attempt.attempt, position)
    return task


def task_position(spec: JobSpec | None, attempt: JobAttempt, role: str, index: int) -> int | None:
    """Where task (role, index) is in `attempt.tasks`: found from the spec (tasks are made role by
    role, index by index), so finding a task costs the same however many the job has."""
    position = None
    if spec is not None and index >= 0:
        offset = 0
        for spec_role in spec.roles:
            if spec_role.name == role:
                if index < spec_role.instances:
                    position = offset + index
                break
            offset += spec_role.instances
    if position is not None and position < len(attempt.tasks):
        task = attempt.tasks[position]
        if task.role == role and task.index == index:
            return position
    for position, task in enumerate(attempt.tasks):  # not made from this spec: look at each
        if task.role == role and task.index == index:
            return position
    return None


def remember(framework: Framework, input_id: str) -> None:
    framework.seen.append(input_id)
    if len(framework.seen) > SEEN_LIMIT:
        del framework.seen[: len(framework.seen) - SEEN_LIMIT]
