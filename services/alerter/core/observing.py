"""Turning lifecycle events into series the rules can test.

Job status change notifications (extras.jobStatusChangeNotification in a job's config) become
`pai_job_status_change` series labelled with the new state and `notify="true"` when the owner
asked for that state; the built-in rule fires on them and the routing sends the email. Each
change is a fact of the job's events, not a state polled: its series stays `keep` seconds
whatever the job does next, so a job that starts and ends between two evaluations still has its
RUNNING told (its end removes its other series, never its changes), and `observe` says when an
event changed a job's state, so the service evaluates at once rather than at its next tick. A job's
owner and name are remembered from `job.submitted` so every job-scoped alert carries `user` and
`job_name`: that is what lets users see their own alerts and templates name the job. When the
owner registered an e-mail address (`contacts`, user name -> address, kept current by the
service) the alert also carries `user_email`, so a receiver can write `to: "$user_email"`; an
owner without one gets no such label, and the email adapter drops a `to` left unresolved. The
address is read when a series is set: a changed address applies to the next status change. A
job's pending series keeps the labels it began with, so a change never restarts its `for`.

At start the service replays the job and node streams through `observe(..., replayed=True)`,
each event at the time it occurred: the series then carry their real start, so a job pending
since before the restart is as old to the rules as it really is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from libs.protocol.events import (
    Event,
    JobCompleted,
    JobPending,
    JobRetrying,
    JobScheduled,
    JobSubmitted,
    NodeLost,
    NodeReported,
    TaskStarted,
)
from libs.protocol.jobs import JobConfig
from services.alerter.core.series import SeriesStore

JOB_PENDING = "pai_job_pending"
JOB_STATUS_CHANGE = "pai_job_status_change"
NODE_COUNT = "pai_node_count"
NODE_REPORT_AGE = "pai_node_report_age_seconds"
SERVICE_HEARTBEAT_AGE = "pai_service_heartbeat_age_seconds"

# The notification switch in the job protocol for each state label.
_SWITCH = {"RUNNING": "running", "SUCCEEDED": "succeeded", "FAILED": "failed", "STOPPED": "stopped"}
_SWITCH["RETRIED"] = "retried"


@dataclass
class JobInfo:
    user: str
    name: str
    virtual_cluster: str
    notify: frozenset[str] = frozenset()
    running_attempts: set[int] = field(default_factory=set)
    forget_at: float | None = None
    pending_labels: dict[str, str] | None = None  # while waiting: the labels its series began with

    def labels(self, job_id: str) -> dict[str, str]:
        return {"job_id": job_id, "job_name": self.name, "user": self.user}


def notification_switches(config: JobConfig) -> frozenset[str]:
    """The states whose changes the job's owner asked to be told about."""
    wanted = config.extras.job_status_change_notification if config.extras is not None else None
    if wanted is None:
        return frozenset()
    return frozenset(state for state, on in wanted.model_dump().items() if on is True)


class Observer:
    """Applies events to a SeriesStore; remembers jobs for as long as their alerts may need them."""

    def __init__(
        self, store: SeriesStore, *, keep: float = 3600.0, contacts: Mapping[str, str] | None = None
    ) -> None:
        self.store = store
        self.keep = keep
        self.contacts: Mapping[str, str] = contacts if contacts is not None else {}
        self.jobs: dict[str, JobInfo] = {}

    def job_labels(self, job_id: str) -> dict[str, str]:
        info = self.jobs.get(job_id)
        if info is None:
            return {"job_id": job_id}
        labels = info.labels(job_id)
        email = self.contacts.get(info.user)
        if email:
            labels["user_email"] = email
        return labels

    def _pending(self, job_id: str, since: float | None) -> None:
        info = self.jobs.get(job_id)
        labels = self.job_labels(job_id)
        if info is not None:
            labels = info.pending_labels = info.pending_labels or labels
        self.store.set(JOB_PENDING, labels, 1.0, since=since)

    def _status_change(
        self, job_id: str, state: str, attempt: int, now: float, since: float | None = None
    ) -> None:
        info = self.jobs.get(job_id)
        asked = info is not None and _SWITCH[state] in info.notify
        labels = self.job_labels(job_id) | {
            "state": state,
            "attempt": str(attempt),
            "notify": "true" if asked else "false",
        }
        self.store.set(JOB_STATUS_CHANGE, labels, 1.0, expires_at=now + self.keep, since=since)

    def knows(self, job_id: str) -> bool:
        return job_id in self.jobs

    def remember(self, event: JobSubmitted) -> None:
        """Keep a job's owner, name and notification wishes (also for a job submitted before a restart)."""
        if event.job_id not in self.jobs:
            self.jobs[event.job_id] = JobInfo(
                user=event.user,
                name=event.name,
                virtual_cluster=event.virtual_cluster,
                notify=notification_switches(event.config),
            )

    def observe(self, event: Event, now: float, *, replayed: bool = False) -> bool:
        """Apply ``event`` at ``now``; a replayed one's series begin at ``now`` (its own time).

        True when the event changed a job's state (a status change series was set)."""
        since = now if replayed else None
        changed = False
        match event:
            case JobSubmitted():
                self.remember(event)
                self._pending(event.job_id, since)
            case JobPending():
                if event.job_id in self.jobs and self.jobs[event.job_id].forget_at is not None:
                    return False  # a late pending after completion
                # The reason changes as the queue moves; the labels must not, or `for` restarts.
                self._pending(event.job_id, since)
            case JobScheduled():
                self.store.delete(JOB_PENDING, job_id=event.job_id)
                if event.job_id in self.jobs:
                    self.jobs[event.job_id].pending_labels = None
            case TaskStarted():
                info = self.jobs.get(event.job_id)
                if info is not None and event.attempt not in info.running_attempts:
                    info.running_attempts.add(event.attempt)
                    self._status_change(event.job_id, "RUNNING", event.attempt, now, since)
                    changed = True
            case JobRetrying():
                self._status_change(event.job_id, "RETRIED", event.attempt, now, since)
                changed = True
            case JobCompleted():
                # Pending and task metrics of a finished job must not keep its alerts firing; its
                # status changes stay their `keep`, or a RUNNING not yet evaluated would be lost.
                self.store.delete_labelled((JOB_STATUS_CHANGE,), job_id=event.job_id)
                self._status_change(event.job_id, event.state.value, event.attempt, now, since)
                changed = True
                info = self.jobs.get(event.job_id)
                if info is not None:
                    info.forget_at = now + self.keep
            case NodeReported():
                self.store.delete(NODE_COUNT, node_name=event.name)
                ready = "true" if event.healthy else "false"
                labels = {"node_name": event.name, "host_ip": event.address, "ready": ready}
                self.store.set(NODE_COUNT, labels, 1.0, since=since)
                self.store.touch(NODE_REPORT_AGE, {"node_name": event.name}, now)
            case NodeLost():
                self.store.delete(NODE_COUNT, node_name=event.name)
                labels = {"node_name": event.name, "ready": "false", "reason": event.reason}
                self.store.set(NODE_COUNT, labels, 1.0, since=since)
            case _:
                pass
        return changed

    def heartbeat(self, service: str, now: float) -> None:
        self.store.touch(SERVICE_HEARTBEAT_AGE, {"service": service}, now)

    def prune(self, now: float) -> None:
        for job_id in [
            j for j, info in self.jobs.items() if info.forget_at is not None and info.forget_at <= now
        ]:
            del self.jobs[job_id]
