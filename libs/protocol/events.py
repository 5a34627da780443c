"""The lifecycle facts every service publishes and consumes, one frozen model per event.

Events are past tense and versioned. Within a version, changes only add optional fields, so a
subscriber written against version 1 keeps reading. `Event` is a discriminated union over the
`type` field: `decode_event(data)` turns any message on the bus into its model, and
`catalog.py` exports the JSON Schema of the union for external subscribers.

No event carries a secret value: job configs travel masked; secrets stay in their own store.
job.submitted carries the job as the protocol's model (`JobConfig`), so every reader gets typed
fields with the protocol's defaults; on the wire it is the job's protocol JSON, as in version 1.
"""

from __future__ import annotations

import operator
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_serializer

from libs.protocol.jobs import JobConfig, kept_json
from libs.protocol.subjects import alert_subject, job_subject, marketplace_subject, node_subject


def new_event_id() -> str:
    return uuid.uuid4().hex


def utcnow() -> datetime:
    return datetime.now(UTC)


class JobState(StrEnum):
    """OpenPAI's job and task states as its REST API reports them."""

    WAITING = "WAITING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


FINAL_STATES = frozenset({JobState.STOPPED, JobState.SUCCEEDED, JobState.FAILED})


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EventBase(_Model):
    """Fields every event has. `event_id` doubles as the Nats-Msg-Id for deduplication."""

    version: Literal[1] = 1
    event_id: str = Field(default_factory=new_event_id)
    occurred_at: datetime = Field(default_factory=utcnow)

    def subject(self) -> str:
        """The subject this event is published on, built from its own ids."""
        event_type: str = getattr(self, "type")  # noqa: B009 - every concrete event defines it
        kind = event_type.split(".", 1)[0]
        ids = self.model_dump(include={"job_id", "node_id", "alert_id", "item_id"})
        if kind in ("job", "task"):
            return job_subject(str(ids["job_id"]), event_type)
        if kind == "node":
            return node_subject(str(ids["node_id"]), event_type)
        if kind == "marketplace":
            return marketplace_subject(str(ids["item_id"]), event_type)
        return alert_subject(str(ids["alert_id"]), event_type)


def _is_none(value: object) -> bool:
    return value is None


class TaskPlacement(_Model):
    """Where one task runs: the node, the address peers reach it at, and its devices.

    `gpu_milli` is set when the task shares its device: the thousandths of each device in
    `gpu_indices` it holds (absent: the devices are whole). `gpu_memory_mib` caps its device memory.
    Fields at their defaults are left out of the JSON (a placement of a task without devices is
    about 70 bytes instead of 125: a 10,000-task job's job.scheduled is 0.7 MB, not 1.26 MB).
    """

    role: str
    index: int
    node: str
    node_address: str
    gpu_indices: tuple[int, ...] = Field((), exclude_if=operator.not_)
    gpu_milli: int | None = Field(None, ge=1, le=999, exclude_if=_is_none)
    gpu_memory_mib: int | None = Field(None, ge=1, exclude_if=_is_none)


class FailureInfo(_Model):
    """The failure rule that explains an exit, as shown to users in job details."""

    code: int
    phrase: str
    type: Literal["transient", "permanent", "unknown"]
    reason: str = ""
    solution: str = ""
    matched_line: str | None = None
    issuer: str | None = None
    causer: str | None = None


class JobStorage(_Model):
    """A storage the job may mount, resolved from the submitter's groups at submission.

    Only where the storage's data is on the node and where the task sees it: never a credential.
    """

    name: str
    type: str
    path: str = Field(description="where the storage's data is on the node")
    mount_path: str = Field(description="where the task sees it unless the job says otherwise")
    default: bool = False
    read_only: bool = False


class JobSubmitted(EventBase):
    """A job was accepted. Version 2 reads `config` as the protocol's model; version 1 sent the
    same JSON as a plain mapping, so both decode to the same event."""

    version: Literal[1, 2] = 2  # type: ignore[assignment]  # version 2 is this event's alone
    type: Literal["job.submitted"] = "job.submitted"
    job_id: str
    user: str
    name: str
    virtual_cluster: str
    priority: int = 0
    config: JobConfig = Field(
        description="the normalised job config, secrets masked (libs/protocol/rendering.py masked_job), "
        "as protocol JSON: camelCase names, OpenPAI's defaults filled in, nulls left out"
    )
    storages: tuple[JobStorage, ...] = Field(
        (), description="the storages the job's storage plugin may mount (added in version 1)"
    )

    @field_serializer("config")
    def _config_json(self, config: JobConfig) -> dict[str, Any]:
        return kept_json(config)


class JobScheduled(EventBase):
    """Every task of the attempt got a place at once (gang)."""

    type: Literal["job.scheduled"] = "job.scheduled"
    job_id: str
    attempt: int
    placements: tuple[TaskPlacement, ...]
    epoch: int | None = Field(
        None,
        exclude_if=_is_none,
        description="the scheduler leader's lease epoch (libs/protocol/fencing.py; added in version 1)",
    )


class JobPending(EventBase):
    type: Literal["job.pending"] = "job.pending"
    job_id: str
    reason: str
    epoch: int | None = Field(
        None,
        exclude_if=_is_none,
        description="the scheduler leader's lease epoch (libs/protocol/fencing.py; added in version 1)",
    )


class JobPreempting(EventBase):
    """The job is being stopped to make room for `by_job_id`; it will be queued again."""

    type: Literal["job.preempting"] = "job.preempting"
    job_id: str
    by_job_id: str
    reason: str
    epoch: int | None = Field(
        None,
        exclude_if=_is_none,
        description="the scheduler leader's lease epoch (libs/protocol/fencing.py; added in version 1)",
    )


class TaskStarted(EventBase):
    type: Literal["task.started"] = "task.started"
    job_id: str
    attempt: int
    role: str
    index: int
    task_attempt: int = 0
    node: str
    pid: int | None = None
    address: str | None = Field(default=None, description="the IP peers reach the task at")
    ports: dict[str, list[int]] = Field(default_factory=dict, description="reserved ports by label")
    note: str | None = Field(
        default=None,
        description="what the executor tells the user about how the task runs; the local executor: "
        "that the docker image was not used, and the user and directory the commands run as and in",
    )
    image_digest: str | None = Field(
        default=None,
        description="the docker image the task runs, as repository@sha256:... (a run that pins it "
        "runs the same bits); None where no container engine ran it",
    )


class TaskCompleted(EventBase):
    type: Literal["task.completed"] = "task.completed"
    job_id: str
    attempt: int
    role: str
    index: int
    task_attempt: int = 0
    exit_code: int
    failure: FailureInfo | None = None
    diagnostics: str = ""
    image_digest: str | None = Field(
        default=None,
        exclude_if=_is_none,
        description="the docker image the task's runtime pulled and ran, repository@sha256:... "
        "(a task whose image was on the node names it in task.started)",
    )


class JobRetrying(EventBase):
    """The attempt ended and another follows; `counted` says whether it uses up jobRetryCount."""

    type: Literal["job.retrying"] = "job.retrying"
    job_id: str
    attempt: int = Field(description="the attempt that just ended")
    next_attempt: int
    kind: Literal["user", "platform", "resource"]
    counted: bool
    delay_seconds: float = 0.0
    reason: str = ""
    exit_code: int | None = Field(default=None, description="the exit code that ended the attempt")
    failure: FailureInfo | None = None
    trigger_role: str | None = None
    trigger_index: int | None = None


class JobCompleted(EventBase):
    type: Literal["job.completed"] = "job.completed"
    job_id: str
    attempt: int
    state: Literal[JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED]
    exit_code: int
    diagnostics: str = ""
    failure: FailureInfo | None = None
    trigger_role: str | None = None
    trigger_index: int | None = None
    epoch: int | None = Field(
        None,
        exclude_if=_is_none,
        description="the lease epoch of the scheduler leader that refused the job (added in version 1)",
    )


class JobTagged(EventBase):
    """A tag added to (or, with `removed`, taken from) a job by its owner, an admin or an alert."""

    type: Literal["job.tagged"] = "job.tagged"
    job_id: str
    tag: str
    by: str
    removed: bool = False


class JobStopRequested(EventBase):
    type: Literal["job.stop_requested"] = "job.stop_requested"
    job_id: str
    by: str


class NodeReported(EventBase):
    """A node's inventory and health, sent periodically and on change."""

    type: Literal["node.reported"] = "node.reported"
    node_id: str
    name: str
    address: str
    cpu: int
    memory_mb: int
    gpus: int
    gpu_model: str | None = None
    healthy: bool = True
    reason: str = ""


class NodeCordoned(EventBase):
    """An operator or an alert took a node out of (or back into) scheduling; its own reports
    do not undo this, only another node.cordoned with `cordoned` false."""

    type: Literal["node.cordoned"] = "node.cordoned"
    node_id: str
    name: str
    cordoned: bool = True
    reason: str = ""
    by: str = ""


class NodeLost(EventBase):
    type: Literal["node.lost"] = "node.lost"
    node_id: str
    name: str
    reason: str


class AlertFired(EventBase):
    type: Literal["alert.fired"] = "alert.fired"
    alert_id: str
    name: str
    severity: str
    labels: dict[str, str] = Field(default_factory=dict)
    summary: str = ""
    job_id: str | None = None


class AlertResolved(EventBase):
    type: Literal["alert.resolved"] = "alert.resolved"
    alert_id: str
    name: str
    labels: dict[str, str] = Field(default_factory=dict)


class _MarketplaceItemEvent(EventBase):
    """What every marketplace event says about its item (services/marketplace publishes them)."""

    item_id: str
    name: str
    author: str
    item_type: Literal["template", "data"]


class MarketplaceItemCreated(_MarketplaceItemEvent):
    type: Literal["marketplace.item.created"] = "marketplace.item.created"
    visibility: Literal["private", "group", "public"]
    status: Literal["approved", "pending", "rejected"]


class MarketplaceItemUpdated(_MarketplaceItemEvent):
    type: Literal["marketplace.item.updated"] = "marketplace.item.updated"
    changed: tuple[str, ...] = Field(description="the item fields the change set, in the API's names")
    by: str
    status: Literal["approved", "pending", "rejected"]


class MarketplaceItemDeleted(_MarketplaceItemEvent):
    type: Literal["marketplace.item.deleted"] = "marketplace.item.deleted"
    by: str


class MarketplaceItemApproved(_MarketplaceItemEvent):
    """An admin approved a public item: everyone signed in sees it from now on."""

    type: Literal["marketplace.item.approved"] = "marketplace.item.approved"
    by: str


class MarketplaceItemRejected(_MarketplaceItemEvent):
    type: Literal["marketplace.item.rejected"] = "marketplace.item.rejected"
    by: str
    reason: str = ""


class MarketplaceItemStarred(_MarketplaceItemEvent):
    type: Literal["marketplace.item.starred"] = "marketplace.item.starred"
    user: str
    star_number: int = Field(ge=0)


Event = Annotated[
    JobSubmitted
    | JobScheduled
    | JobPending
    | JobPreempting
    | TaskStarted
    | TaskCompleted
    | JobRetrying
    | JobCompleted
    | JobStopRequested
    | JobTagged
    | NodeReported
    | NodeCordoned
    | NodeLost
    | AlertFired
    | AlertResolved
    | MarketplaceItemCreated
    | MarketplaceItemUpdated
    | MarketplaceItemDeleted
    | MarketplaceItemApproved
    | MarketplaceItemRejected
    | MarketplaceItemStarred,
    Field(discriminator="type"),
]

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def decode_event(data: bytes | str) -> Event:
    """Any event from its JSON; raises pydantic.ValidationError for anything else."""
    return EVENT_ADAPTER.validate_json(data)


def encode_event(event: EventBase) -> bytes:
    return event.model_dump_json().encode()


TaskEvent = TaskStarted | TaskCompleted
TaskAttemptKey = tuple[str, int, str, int, int]
"""The task attempt a task event is about: (job id, job attempt, role, index, task attempt)."""


def task_attempt_key(event: TaskEvent) -> TaskAttemptKey:
    return (event.job_id, event.attempt, event.role, event.index, event.task_attempt)


def _key_if_task_event(event: EventBase) -> TaskAttemptKey | None:
    return task_attempt_key(event) if isinstance(event, TaskStarted | TaskCompleted) else None


def task_event_runs(events: Sequence[EventBase], *, longest: int | None = None) -> list[list[EventBase]]:
    """`events` cut into runs, in order: consecutive task.started (or task.completed) events of one
    job, each of a different task attempt, at most `longest` to a run; every other event is a run
    of its own. The events of a run can be handled in any order, or together (each is about its
    own task attempt), while a run still comes after everything before it."""
    runs: list[list[EventBase]] = []
    keys: set[TaskAttemptKey] = set()
    for event in events:
        key = _key_if_task_event(event)
        run = runs[-1] if runs else None
        last = _key_if_task_event(run[-1]) if run else None
        if (
            run is None
            or key is None
            or last is None
            or type(run[-1]) is not type(event)
            or last[0] != key[0]
            or key in keys
            or (longest is not None and len(run) >= longest)
        ):
            runs.append([event])
            keys = {key} if key is not None else set()
        else:
            run.append(event)
            keys.add(key)
    return runs
