"""Job details' task tables, kept while rest runs, so a large job's detail costs its changes.

The `taskRoles` of a job of ten thousand tasks is about ten megabytes. A table per (job,
attempt) (services/rest/core/task_table.py) keeps each task's status encoded and is brought up
to date from the task rows written after the revision it was read at. Tables are bounded by
their total size; the least recently used go first. A small job's table is not kept: building
its roles again costs less than keeping them.
"""

from __future__ import annotations

from collections import OrderedDict

from services.rest.core.task_table import TaskTable

DEFAULT_BUDGET = 128 * 1024 * 1024
SMALLEST_KEPT = 64 * 1024


class TaskRolesCache:
    def __init__(self, budget: int = DEFAULT_BUDGET) -> None:
        self._budget = budget
        self._tables: OrderedDict[tuple[str, int], TaskTable] = OrderedDict()

    @property
    def size(self) -> int:
        """Bytes the kept tables hold."""
        return sum(table.size for table in self._tables.values())

    def table(self, job_id: str, job_attempt: int) -> TaskTable:
        """The kept table of the job's attempt, or a new one with nothing read."""
        found = self._tables.get((job_id, job_attempt))
        if found is None:
            return TaskTable(job_attempt)
        self._tables.move_to_end((job_id, job_attempt))
        return found

    def keep(self, job_id: str, table: TaskTable) -> None:
        """Keep the table (if it is worth keeping), dropping the least recently used over budget."""
        key = (job_id, table.job_attempt)
        if table.size < SMALLEST_KEPT or table.size > self._budget // 4:
            self._tables.pop(key, None)
            return
        self._tables[key] = table
        self._tables.move_to_end(key)
        used = self.size
        while used > self._budget and len(self._tables) > 1:
            _key, dropped = self._tables.popitem(last=False)
            used -= dropped.size
