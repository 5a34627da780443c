"""What the deciders take besides events, and what they ask the world to do.

Observations come from the executor (a task's process was launched; after a restart, what was
found of a task). Effects are intentions: the handler carries them out in order after the new
snapshot is stored, so a crash between the two leaves an intention on record, never an action
without one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from libs.protocol.events import (
    EventBase,
    JobPreempting,
    JobScheduled,
    JobStopRequested,
    JobSubmitted,
    TaskCompleted,
    TaskPlacement,
)
from services.orchestrator.core.frameworks import Framework, TaskKey


@dataclass(frozen=True)
class Context:
    """The outside values a decision may depend on: the time and one uniform random number."""

    now: datetime
    random: float = 0.5


@dataclass(frozen=True)
class TaskLaunched:
    """The executor started the task's process (or found it alive after a restart)."""

    job_id: str
    key: TaskKey
    pid: int
    task_dir: str
    ports: dict[str, list[int]] = field(default_factory=dict)
    """The ports reserved for the task, by label, as its spec gave them to the runtime."""
    note: str | None = None
    """What the executor tells the user about how the task runs (the local executor: its image)."""
    image_digest: str | None = None
    """The docker image the task runs, as ``repository@sha256:...`` (a container engine's)."""


ProbeStatus = Literal["alive", "ended", "absent"]


@dataclass(frozen=True)
class Probe:
    """What the executor found of a task after a restart.

    alive: its process still runs; ended: it ran and is gone (its result, if any, is on disk);
    absent: its process never began.
    """

    status: ProbeStatus
    pid: int | None = None
    task_dir: str | None = None


@dataclass(frozen=True)
class Recovered:
    """The orchestrator restarted; here is what the executor found of every task it may own."""

    job_id: str
    probes: dict[TaskKey, Probe]


BusEvent = JobSubmitted | JobScheduled | JobStopRequested | JobPreempting | TaskCompleted
Input = BusEvent | TaskLaunched | Recovered


@dataclass(frozen=True)
class StartTask:
    job_id: str
    key: TaskKey
    placement: TaskPlacement | None


@dataclass(frozen=True)
class StopTask:
    """End a live task. `exit_code` is what its end is reported as (-210 a stop, -220 the
    attempt completing), whatever signal the process died of."""

    job_id: str
    key: TaskKey
    reason: str
    exit_code: int = -220


@dataclass(frozen=True)
class AdoptTask:
    """Watch a task process found alive after a restart."""

    job_id: str
    key: TaskKey
    pid: int
    task_dir: str


@dataclass(frozen=True)
class ReportExit:
    """Publish task.completed for a task that ended while nobody watched it."""

    job_id: str
    key: TaskKey
    task_dir: str | None


@dataclass(frozen=True)
class Publish:
    event: EventBase


Effect = StartTask | StopTask | AdoptTask | ReportExit | Publish


@dataclass
class Decision:
    framework: Framework | None
    effects: list[Effect] = field(default_factory=list)
    # The tasks of `framework` this decision made its own (see frameworks.editable_task): by id,
    # their (job attempt, position). They are what it changed of the job's tasks.
    owned: dict[int, tuple[int, int]] = field(default_factory=dict, repr=False, compare=False)
