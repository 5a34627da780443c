"""The `taskRoles` of job details, kept encoded while the job's task rows stay as they were.

A job of ten thousand tasks has a detail of about ten megabytes: reading its rows, building
the statuses and encoding them costs seconds, while the rows change only when the projection
applies an event of the job. So the encoded `taskRoles` is kept under (job id, attempt, how
many events of the job the read model has applied), and a detail asked for again costs the
small rest of it. Entries are bounded by their total size; the least recently used go first.
"""

from __future__ import annotations

from collections import OrderedDict

Key = tuple[str, int, int]

DEFAULT_BUDGET = 64 * 1024 * 1024
SMALLEST_KEPT = 64 * 1024
"""Below this size building the roles again costs less than keeping them."""


class TaskRolesCache:
    def __init__(self, budget: int = DEFAULT_BUDGET) -> None:
        self._budget = budget
        self._used = 0
        self._entries: OrderedDict[tuple[str, int], tuple[int, bytes]] = OrderedDict()

    def get(self, key: Key) -> bytes | None:
        job_id, attempt, version = key
        found = self._entries.get((job_id, attempt))
        if found is None or found[0] != version:
            return None
        self._entries.move_to_end((job_id, attempt))
        return found[1]

    def put(self, key: Key, encoded: bytes) -> None:
        job_id, attempt, version = key
        if len(encoded) < SMALLEST_KEPT or len(encoded) > self._budget // 4:
            return
        old = self._entries.pop((job_id, attempt), None)
        if old is not None:
            self._used -= len(old[1])
        self._entries[(job_id, attempt)] = (version, encoded)
        self._used += len(encoded)
        while self._used > self._budget:
            _key, (_version, dropped) = self._entries.popitem(last=False)
            self._used -= len(dropped)
