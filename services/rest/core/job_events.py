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

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from libs.protocol.events import (
    Event,
    EventBase,
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


# Which node ran each task attempt (attempt, role, index, task attempt), from its start, so the
# fact of its end names the same host.
_Nodes = dict[tuple[int, str, int, int], str]


def _job_wide(kind: str, reason: str, message: str, source: str) -> dict[str, Any]:
    return {**JOB_WIDE, "type": kind, "reason": reason, "message": message, "source": source}


def _submitted(event: JobSubmitted, frame: str, nodes: _Nodes) -> list[dict[str, Any]]:
    text = f"Job submitted by {event.user} to virtual cluster {event.virtual_cluster}."
    return [_job_wide(NORMAL, "Submitted", text, "rest-server")]


def _pending(event: JobPending, frame: str, nodes: _Nodes) -> list[dict[str, Any]]:
    return [_job_wide(WARNING, "FailedScheduling", event.reason, "scheduler")]


def _preempting(event: JobPreempting, frame: str, nodes: _Nodes) -> list[dict[str, Any]]:
    text = f"Preempted by job {event.by_job_id}: {event.reason}" if event.reason else "Preempted."
    return [_job_wide(WARNING, "Preempting", text, "scheduler")]


def _scheduled(event: JobScheduled, frame: str, nodes: _Nodes) -> list[dict[str, Any]]:
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


def _task_started(event: TaskStarted, frame: str, nodes: _Nodes) -> list[dict[str, Any]]:
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


def _task_completed(event: TaskCompleted, frame: str, nodes: _Nodes) -> list[dict[str, Any]]:
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


def _retrying(event: JobRetrying, frame: str, nodes: _Nodes) -> list[dict[str, Any]]:
    why = event.reason or (event.failure.phrase if event.failure else "")
    text = f"Attempt {event.attempt} ended ({event.kind} failure); retrying as attempt {event.next_attempt}"
    return [_job_wide(WARNING, "Retrying", text + (f": {why}." if why else "."), "orchestrator")]


def _stop_requested(event: JobStopRequested, frame: str, nodes: _Nodes) -> list[dict[str, Any]]:
    return [_job_wide(NORMAL, "StopRequested", f"Stop requested by {event.by}.", "rest-server")]


def _completed(event: JobCompleted, frame: str, nodes: _Nodes) -> list[dict[str, Any]]:
    failed = event.state.value == "FAILED"
    phrase = event.failure.phrase if event.failure else None
    text = f"Job {event.state.value.lower()} after attempt {event.attempt}"
    if failed:
        text += f" with {_failure_text(event.exit_code, phrase, event.diagnostics)}"
    kind = WARNING if failed else NORMAL
    return [_job_wide(kind, event.state.value.capitalize(), text + ".", "orchestrator")]


# The fields of one or more events for each lifecycle fact, by the fact's type (cosmicpython's
# message bus); a fact of any other type shows none.
_FACTS: dict[type[EventBase], Callable[[Any, str, _Nodes], list[dict[str, Any]]]] = {
    JobSubmitted: _submitted,
    JobPending: _pending,
    JobPreempting: _preempting,
    JobScheduled: _scheduled,
    TaskStarted: _task_started,
    TaskCompleted: _task_completed,
    JobRetrying: _retrying,
    JobStopRequested: _stop_requested,
    JobCompleted: _completed,
}


def _facts(event: Event, frame: str, nodes: _Nodes) -> list[dict[str, Any]]:
    """(fields of one or more events) for one fact; empty for facts that are not lifecycle."""
    rule = _FACTS.get(type(event))
    return rule(event, frame, nodes) if rule is not None else []


def job_events(job: Mapping[str, Any], history: Iterable[tuple[Event, int]]) -> list[dict[str, Any]]:
    """OpenPAI event items for ``history`` (facts in stream order), newest last-seen first."""
    frame = framework_name(job["username"], job["name"])
    nodes: _Nodes = {}
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
