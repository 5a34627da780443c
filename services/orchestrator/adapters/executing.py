"""What the handlers need from an executor, whichever runs the tasks (local processes or pods).

An executor starts a task attempt at most once (a second start of the same attempt raises
AlreadyRunningError, so it is adopted instead), tells what it finds of a task after a restart
(`probe`), and reports every task's end exactly once per watch through its exit callback. The
types the protocol names (a task's end, the callbacks, the errors a start may raise) live here
beside it, so handlers and executors share them without one executor importing another.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from libs.protocol.events import FailureInfo
from runtime.exitcodes import CONFINE_FAILED
from services.orchestrator.core.effects import Probe
from services.orchestrator.core.frameworks import Framework, TaskKey


@dataclass(frozen=True)
class TaskExit:
    """How a task attempt ended, as an executor reports it: its exit code (OpenPAI's exit spec)
    and, for a failure, the verdict of the failure rules."""

    job_id: str
    key: TaskKey
    exit_code: int
    failure: FailureInfo | None
    diagnostics: str
    image_digest: str | None = None
    """The docker image the task's runtime pulled and ran, repository@sha256:... (where it did)."""


ExitCallback = Callable[[TaskExit], Awaitable[None]]
SecretsSource = Callable[[str], Awaitable[dict[str, Any] | None]]


class ContainmentError(Exception):
    """The task cannot be given its own user or its limits here: it does not run (nothing runs
    unconfined), and its end is a platform failure that is retried (RuntimeConfineFailed)."""

    exit_code = CONFINE_FAILED


class AlreadyRunningError(Exception):
    """This task attempt was started before (its process holds its lock, or it ran and ended): it
    must be adopted (its end reported), not started again."""


def to_failure_info(verdict: Any) -> FailureInfo:
    """The event's view of a failure verdict (from libs.failures or a runtime result dict)."""
    data = verdict.model_dump() if hasattr(verdict, "model_dump") else dict(verdict)
    solution = data.get("solution") or ""
    return FailureInfo(
        code=int(data.get("code", 0)),
        phrase=str(data.get("phrase", "")),
        type=data.get("type", "unknown")
        if data.get("type") in ("transient", "permanent", "unknown")
        else "unknown",
        reason=str(data.get("reason") or ""),
        solution="; ".join(solution) if isinstance(solution, list | tuple) else str(solution),
        matched_line=data.get("matched_line") or data.get("matchedLine"),
        issuer=data.get("issuer"),
        causer=data.get("causer"),
    )


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
