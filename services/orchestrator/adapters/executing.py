"""What the handlers need from an executor, whichever runs the tasks (local processes or pods).

An executor starts a task attempt at most once (a second start of the same attempt raises
AlreadyRunningError, so it is adopted instead), tells what it finds of a task after a restart
(`probe`), and reports every task's end exactly once per watch through its exit callback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from services.orchestrator.adapters.local import TaskExit
from services.orchestrator.core.effects import Probe
from services.orchestrator.core.frameworks import Framework, TaskKey


class Executor(Protocol):
    async def start(self, framework: Framework, key: TaskKey) -> tuple[int, Path]:
        """Launch the task attempt; returns a process id (0 where there is none) and its directory."""
        ...

    def adopt(self, job_id: str, key: TaskKey, pid: int, directory: Path) -> None:
        """Watch a task attempt started before (found alive after a restart, or met again by a
        start): its end is reported once, at once if it has already ended. `pid` is 0 where it is
        not known yet."""
        ...

    def probe(self, job_id: str, key: TaskKey) -> Probe: ...

    async def stop(self, job_id: str, key: TaskKey, exit_code: int = -220) -> None: ...

    async def report(self, job_id: str, key: TaskKey) -> None:
        """Report the end of a task attempt that ended unwatched."""
        ...

    def exit_of(self, job_id: str, key: TaskKey, *, returncode: int | None = None) -> TaskExit: ...

    def release(self, job_id: str, attempt: int) -> None:
        """The job attempt is over: free what it held on the node (ports); may do nothing."""
        ...

    async def close(self) -> None: ...
