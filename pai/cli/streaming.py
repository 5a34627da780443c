"""Following the platform's live events from the command line: the SSE client and its words.

``follow`` reads ``GET /api/v2/events`` with httpx-sse and, when the connection drops (a
gateway restart, a proxy timeout), reconnects with the last id it saw, so the caller sees
every event once. ``describe`` turns an event into the line `pai job watch` prints.
"""

from __future__ import annotations

import json
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import SSEError, connect_sse

from pai.cli.client import ApiError, ServerUnreachableError, hint_of

RECONNECTS = 30
EXIT_CODES = {"SUCCEEDED": 0, "FAILED": 1, "STOPPED": 2}


@dataclass(frozen=True)
class Received:
    id: str
    type: str
    event: dict[str, Any]


def _error(response: httpx.Response) -> ApiError:
    response.read()
    try:
        body = response.json()
    except ValueError:
        body = {}
    body = body if isinstance(body, dict) else {}
    return ApiError(
        response.status_code,
        str(body.get("code") or f"HTTP{response.status_code}"),
        str(body.get("message") or response.text or response.reason_phrase),
        hint=hint_of(body),
    )


def follow(
    server: str, token: str | None, params: dict[str, str], *, since: str | None = None
) -> Generator[Received, None, None]:
    """Every event the filters select, from ``since`` (None: from now), reconnecting as needed."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    last = since
    failures = 0
    with httpx.Client(base_url=server, headers=headers, timeout=httpx.Timeout(10.0, read=None)) as client:
        while True:
            query = dict(params)
            extra = {"Last-Event-ID": last} if last is not None else {}
            try:
                with connect_sse(client, "GET", "/api/v2/events", params=query, headers=extra) as source:
                    if source.response.status_code != 200:
                        raise _error(source.response)
                    for message in source.iter_sse():
                        failures = 0
                        if not message.data:
                            continue  # a keep-alive comment (httpx-sse hands it on, empty)
                        last = message.id or last
                        yield Received(message.id, message.event, json.loads(message.data))
            except (httpx.TransportError, SSEError) as exc:
                failures += 1
                if failures > RECONNECTS:
                    raise ServerUnreachableError(
                        f"lost the event stream at {server} ({type(exc).__name__}) and could not resume"
                    ) from None
                time.sleep(min(5.0, 0.2 * failures))  # a dropped stream: back off, then resume
                continue
            # The server ended the stream (it stops, or found us slow): resume where we were.


def _task(event: dict[str, Any]) -> str:
    return f"{event.get('role')}[{event.get('index')}]"


def _failure(event: dict[str, Any]) -> str:
    failure = event.get("failure") or {}
    reason = failure.get("reason") or failure.get("phrase") or event.get("reason") or ""
    return f": {reason}" if reason else ""


def _attempts(event: dict[str, Any]) -> str:
    """The job's attempt, and the task's own try where the task was retried on its own (gang
    allocation off): a retried task is not 'attempt 0' twice."""
    task_attempt = event.get("task_attempt") or 0
    if task_attempt:
        return f"attempt {event.get('attempt')}, task retry {task_attempt}"
    return f"attempt {event.get('attempt')}"


def describe(kind: str, event: dict[str, Any]) -> str:
    """One line saying what happened to the job."""
    attempt = event.get("attempt")
    match kind:
        case "job.submitted":
            return f"submitted {event['user']}~{event['name']} to virtual cluster {event['virtual_cluster']}"
        case "job.pending":
            return f"waiting: {event['reason']}"
        case "job.scheduled":
            places = ", ".join(f"{p['role']}[{p['index']}] on {p['node']}" for p in event["placements"])
            return f"attempt {attempt} scheduled: {places}"
        case "job.preempting":
            return f"preempted to make room for another job: {event['reason']}"
        case "task.started":
            return f"task {_task(event)} started on {event['node']} ({_attempts(event)})"
        case "task.completed":
            again = f" ({_attempts(event)})" if event.get("task_attempt") else ""
            return f"task {_task(event)} exited with code {event['exit_code']}{again}{_failure(event)}"
        case "job.retrying":
            counted = "counted against retries" if event.get("counted") else "not counted"
            return (
                f"attempt {attempt} failed{_failure(event)}; retrying as attempt "
                f"{event['next_attempt']} ({event['kind']} failure, {counted})"
            )
        case "job.stop_requested":
            return f"stop requested by {event['by']}"
        case "job.tagged":
            return f"tag {event['tag']} {'removed' if event.get('removed') else 'added'} by {event['by']}"
        case "job.completed":
            return f"job {event['state']} (exit code {event['exit_code']}){_failure(event)}"
    return kind
