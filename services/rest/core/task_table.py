"""The `taskRoles` of a job detail, kept encoded task by task and brought up to date from the
task rows that changed.

A job of ten thousand tasks has a detail of about ten megabytes. Reading every row, building
every status and encoding it again on each change of one task costs hundreds of milliseconds;
a table instead keeps each task's status encoded, with the attempt and revision of the row it
came from, and takes only the rows written after the revision it was last brought to (the job's
`tasks_revision`, raised by every projection transaction that writes its task rows). Joining
the kept pieces is a copy.

What it answers is exactly what `views.task_roles` and `views.shared_gpus` build from all the
rows: each role of the config in its order, then roles only the rows know, by name; each task at
its latest attempt, a task not placed yet as a WAITING placeholder.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import orjson

from services.rest.core import views

NOTHING_READ = -1
"""The revision of a table no row was read into: every row is newer."""


class _Task(NamedTuple):
    task_attempt: int
    revision: int
    encoded: bytes
    share: views.GpuShare | None


class TaskTable:
    """The task statuses of one attempt of one job, each encoded."""

    def __init__(self, job_attempt: int) -> None:
        self.job_attempt = job_attempt
        self.revision = NOTHING_READ
        self._tasks: dict[tuple[str, int], _Task] = {}
        self._waiting: dict[tuple[str, int], bytes] = {}
        self._pieces: list[bytes] | None = None
        self._size = 0

    @property
    def size(self) -> int:
        """Bytes held (the pieces; their list shares them), for a cache's budget."""
        return self._size + 8 * len(self._pieces or ())

    def apply(self, job: Mapping[str, Any], rows: Iterable[Mapping[str, Any]], revision: int) -> None:
        """Take rows read after `self.revision`, the job's `tasks_revision` being `revision` (or
        more) when they were read. A row older than what a task holds is left out, so rows read
        by two requests at once may be applied in either order."""
        for row in rows:
            key = (row["role"], row["task_index"])
            held = self._tasks.get(key)
            order = (row["task_attempt"], row["revision"])
            if held is not None and (held.task_attempt, held.revision) >= order:
                continue
            status = views.task_status(job, row)
            task = _Task(*order, _json(status), views.gpu_share(status))
            self._tasks[key] = task
            self._size += len(task.encoded) - (len(held.encoded) if held is not None else 0)
            self._size -= len(self._waiting.pop(key, b""))
            self._pieces = None
        self.revision = max(self.revision, revision)

    def pieces(self, job: Mapping[str, Any]) -> list[bytes]:
        """`"taskRoles": {...}, "sharedGpus": [...]` (the end of a detail, without its braces) in
        pieces, most of them the tasks' kept statuses: whoever sends it joins them once."""
        if self._pieces is None:
            self._pieces = self._encode(job)
        return self._pieces

    def encoded(self, job: Mapping[str, Any]) -> bytes:
        """The pieces joined."""
        return b"".join(self.pieces(job))

    def _encode(self, job: Mapping[str, Any]) -> list[bytes]:
        pieces: list[bytes] = [b'"taskRoles": {']
        shares: list[tuple[str, int, views.GpuShare]] = []
        for number, (role, count) in enumerate(views.role_sizes(job, self._tasks).items()):
            name = json.dumps(role).encode()
            if number:
                pieces.append(b", ")
            pieces += (name, b': {"taskRoleStatus": {"name": ', name, b'}, "taskStatuses": [')
            for index in range(count):
                if index:
                    pieces.append(b", ")
                task = self._tasks.get((role, index))
                if task is None:
                    pieces.append(self._waiting_status(job, role, index))
                    continue
                pieces.append(task.encoded)
                if task.share is not None:
                    shares.append((role, index, task.share))
            pieces.append(b"]}")
        pieces += (b'}, "sharedGpus": ', json.dumps(views.shared_gpu_list(shares)).encode())
        return pieces

    def _waiting_status(self, job: Mapping[str, Any], role: str, index: int) -> bytes:
        encoded = self._waiting.get((role, index))
        if encoded is None:
            status = views.waiting_status(job, self.job_attempt, role, index)
            encoded = self._waiting[(role, index)] = _json(status)
            self._size += len(encoded)
        return encoded


def _json(status: Mapping[str, Any]) -> bytes:
    """A status encoded by orjson (ten times as fast as Python's json), or by Python's json what
    orjson refuses (an integer past 64 bits in a stored exit spec, say)."""
    try:
        return orjson.dumps(status)
    except orjson.JSONEncodeError:
        return json.dumps(status).encode()
