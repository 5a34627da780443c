"""A job's lifecycle facts as OpenPAI's job events (GET /api/v2/jobs/{user}~{job}/events).

OpenPAI shows the Kubernetes events of a job's pods: each names its pod (task role, index),
has a type (Normal or Warning), a reason, a message, first and last timestamps and a count of
repeats. Our facts carry the same information, so each maps to one event: a placement and a
start per task are Normal, a pending placement, a preemption, a retry and a failed task or
job are Warning. Facts about the whole job (submitted, pending, retrying, completed) name no
task: their task fields are empty and their index is -1. Identical events of one task (the
same reason and message) fold into one with a count, as Kubernetes folds repeats.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from libs.protocol.events import (
    Event,
    JobCompleted,
    JobPending,
    JobPreempting,
    JobRetrying,
    JobScheduled,
    JobStopRequested,
    JobSubmitted,
    TaskCompleted,
    TaskStarted,
)
from services.rest.core.states import framework_name, task_uid

NORMAL, WARNING = "Normal", "Warning"
TYPES = (NORMAL, WARNING)


def timestamp(moment: datetime) -> str:
    """Kubernetes' event time format as OpenPAI returns it, e.g. 2020-09-29T09:46:42.000Z."""
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def _task(frame: str, job_id: str, role: str, index: int) -> dict[str, Any]:
    return {
        "podUid": task_uid(job_id, role, index),
        "taskroleName": role,
        "taskName": f"{frame}-{role}-{index}",
        "taskIndex": index,
    }


JOB_WIDE = {"podUid": "", "taskroleName": "", "taskName": "", "taskIndex": -1}


def _failure_text(exit_code: int, phrase: str | None, diagnostics: str) -> str:
    text = f"exit code {exit_code}" + (f" ({phrase})" if phrase else "")
    return text + (f": {diagnostics}" if diagnostics else "")


def _facts(event: Event, frame: str, nodes: dict[tuple[int, str, int, int], str]) -> list[dict[str, Any]]:
    """(fields of one or more events) for one fact; empty for facts that are not lifecycle."""
    if isinstance(event, JobSubmitted):
        text = f"Job submitted by {event.user} to virtual cluster {event.virtual_cluster}."
        return [{**JOB_WIDE, "type": NORMAL, "reason": "Submitted", "message": text, "source": "rest-server"}]
    if isinstance(event, JobPending):
        return [
            {
                **JOB_WIDE,
                "type": WARNING,
                "reason": "FailedScheduling",
                "message": event.reason,
                "source": "scheduler",
            }
        ]
    if isinstance(event, JobPreempting):
        text = f"Preempted by job {event.by_job_id}: {event.reason}" if event.reason else "Preempted."
        return [{**JOB_WIDE, "type": WARNING, "reason": "Preempting", "message": text, "source": "scheduler"}]
    if isinstance(event, JobScheduled):
        return [
            {
                **_task(frame, event.job_id, place.role, place.index),
                "type": NORMAL,
                "reason": "Scheduled",
                "message": f"Attempt {event.attempt}: assigned {frame}-{place.role}-{place.index}"
                f" to {place.node}.",
                "source": "scheduler",
                "host": place.node,
            }
            for place in event.placements
        ]
    if isinstance(event, TaskStarted):
        nodes[(event.attempt, event.role, event.index, event.task_attempt)] = event.node
        return [
            {
                **_task(frame, event.job_id, event.role, event.index),
                "type": NORMAL,
                "reason": "Started",
                "message": f"Attempt {event.attempt}: task started on {event.node}.",
                "source": "orchestrator",
                "host": event.node,
            }
        ]
    if isinstance(event, TaskCompleted):
        failed = event.exit_code != 0
        phrase = event.failure.phrase if event.failure else None
        outcome = f"failed with {_failure_text(event.exit_code, phrase, event.diagnostics)}"
        text = f"Attempt {event.attempt}: task {outcome if failed else 'succeeded'}."
        return [
            {
                **_task(frame, event.job_id, event.role, event.index),
                "type": WARNING if failed else NORMAL,
                "reason": "Failed" if failed else "Completed",
                "message": text,
                "source": "orchestrator",
                "host": nodes.get((event.attempt, event.role, event.index, event.task_attempt)),
            }
        ]
    if isinstance(event, JobRetrying):
        why = event.reason or (event.failure.phrase if event.failure else "")
        text = (
            f"Attempt {event.attempt} ended ({event.kind} failure); retrying as attempt {event.next_attempt}"
        )
        return [
            {
                **JOB_WIDE,
                "type": WARNING,
                "reason": "Retrying",
                "message": text + (f": {why}." if why else "."),
                "source": "orchestrator",
            }
        ]
    if isinstance(event, JobStopRequested):
        text = f"Stop requested by {event.by}."
        return [
            {**JOB_WIDE, "type": NORMAL, "reason": "StopRequested", "message": text, "source": "rest-server"}
        ]
    if isinstance(event, JobCompleted):
        failed = event.state.value == "FAILED"
        phrase = event.failure.phrase if event.failure else None
        text = f"Job {event.state.value.lower()} after attempt {event.attempt}"
        if failed:
            text += f" with {_failure_text(event.exit_code, phrase, event.diagnostics)}"
        return [
            {
                **JOB_WIDE,
                "type": WARNING if failed else NORMAL,
                "reason": event.state.value.capitalize(),
                "message": text + ".",
                "source": "orchestrator",
            }
        ]
    return []


def job_events(job: Mapping[str, Any], history: Iterable[tuple[Event, int]]) -> list[dict[str, Any]]:
    """OpenPAI event items for ``history`` (facts in stream order), newest last-seen first."""
    frame = framework_name(job["username"], job["name"])
    nodes: dict[tuple[int, str, int, int], str] = {}
    folded: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for event, sequence in history:
        when = timestamp(event.occurred_at)
        facts = _facts(event, frame, nodes)
        for fact in facts:
            key = (fact["podUid"], fact["type"], fact["reason"], fact["message"])
            seen = folded.get(key)
            if seen is not None:
                seen["count"] += 1
                seen["lastTimestamp"] = when
                seen["_order"] = sequence
                continue
            folded[key] = {
                "uid": event.event_id
                if len(facts) == 1
                else f"{event.event_id}-{fact['taskroleName']}-{fact['taskIndex']}",
                "frameworkName": frame,
                "podUid": fact["podUid"],
                "taskroleName": fact["taskroleName"],
                "taskName": fact["taskName"],
                "taskIndex": fact["taskIndex"],
                "type": fact["type"],
                "reason": fact["reason"],
                "message": fact["message"],
                "firstTimestamp": when,
                "lastTimestamp": when,
                "count": 1,
                "sourceComponent": fact["source"],
                "sourceHost": fact.get("host"),
                "_order": sequence,
            }
    items = sorted(folded.values(), key=lambda item: (item["lastTimestamp"], item["_order"]), reverse=True)
    return [{key: value for key, value in item.items() if key != "_order"} for item in items]
