"""Printing a task's log, and following it as `tail -f` does: each byte once, then wait for more.

The log route answers a window of the file: its text, where the text starts (`offset`), where
the next read starts (`nextOffset`) and the file's size. A reader asks again from `nextOffset`
until it reaches the size; a follower then sleeps `interval` seconds, looks at the task again and
reads what was added. It stops once the task (or its job) has ended and everything written
before that has been read. A new attempt of the task starts a new log, read from its beginning;
so does a file the runtime rotated (it restarts smaller than what was read).

Every request counts against the API's rate limits: a follower makes two requests per interval
while nothing is new. When the server still answers 429 it waits the `Retry-After` it was given
and goes on, so following never ends with an error that a wait would have avoided.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from libs.protocol.job_details import JobDetail
from pai.cli.client import ApiError, ClientError, PaiClient

FINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
# While catching up, one request reads this much: a large log takes few requests.
PIECE_BYTES = 1024 * 1024
# A 429 without Retry-After waits this long before trying again.
DEFAULT_RETRY_AFTER = 1.0

T = TypeVar("T")


@dataclass(frozen=True)
class LogTarget:
    """The log to print: a task of a job, and which of its files (all, stdout or stderr)."""

    user: str
    name: str
    role: str | None
    index: int
    file: str = "all"


def _task(detail: dict[str, Any], target: LogTarget) -> tuple[str, dict[str, Any]]:
    roles = JobDetail.read(detail).roles
    chosen = target.role or next(iter(roles), None)
    if chosen is None or chosen not in roles:
        known = ", ".join(roles) or "none yet"
        raise ClientError(f"job {target.user}~{target.name} has no task role {chosen!r} (roles: {known}).")
    tasks = {t["taskIndex"]: t for t in roles[chosen]}
    if target.index not in tasks:
        raise ClientError(f"task role {chosen} has no task {target.index} (it has {len(tasks)}).")
    return chosen, tasks[target.index]


class LogFollower:
    """Reads one task's log through `client`, writing text to `write` and notes to `note`."""

    def __init__(
        self,
        client: PaiClient,
        target: LogTarget,
        *,
        write: Callable[[str], None],
        note: Callable[[str], None],
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.target = target
        self.write = write
        self.note = note
        self.sleep = sleep

    def _call(self, request: Callable[[], T]) -> T:
        """One request; a 429 waits what the server asks and tries again."""
        while True:
            try:
                return request()
            except ApiError as exc:
                if exc.status != 429:
                    raise
                wait = exc.retry_after if exc.retry_after is not None else DEFAULT_RETRY_AFTER
                self.note(f"the platform asks to slow down; waiting {wait:g} s")
                self.sleep(wait)

    def _piece(self, detail: dict[str, Any], role: str, task: dict[str, Any], offset: int) -> dict[str, Any]:
        return self.client.log(
            self.target.user,
            self.target.name,
            attempt=int(detail["jobStatus"]["attemptId"]),
            role=role,
            index=self.target.index,
            task_attempt=int(task.get("attemptId", 0)),
            file=self.target.file,
            offset=offset,
            limit=PIECE_BYTES,
        )

    def _read_to_end(self, detail: dict[str, Any], role: str, task: dict[str, Any], start: int) -> int:
        """Print the log from byte `start` to its current end; the position after the last byte read."""
        position = start
        while True:
            piece = self._call(functools.partial(self._piece, detail, role, task, position))
            size = int(piece.get("size", 0))
            if size < position:
                # The runtime rolled the file over (name.1 keeps the old one): read the new one.
                self.note(f"log {self.target.file} was rotated; reading the new file from its start")
                position = 0
                continue
            content = str(piece.get("content", ""))
            if content:
                self.write(content)
            # Servers without `nextOffset` send whole characters: their bytes are the window read.
            after = int(piece.get("nextOffset", int(piece.get("offset", position)) + len(content.encode())))
            if after <= position or after >= size:
                return max(after, position)
            position = after

    def run(self, *, follow: bool, interval: float) -> None:
        target = self.target
        position = 0
        reading: tuple[int, int] | None = None  # (job attempt, task attempt) of the log being read
        waiting_said = ""  # what the follower last said of a task that has not started
        while True:
            detail = self._call(lambda: self.client.job(target.user, target.name))
            role, task = _task(detail, target)
            job_state = detail["jobStatus"]["state"]
            ended = job_state in FINAL_STATES or task.get("taskState") in FINAL_STATES
            if task.get("containerNodeName") is not None:
                attempt = (int(detail["jobStatus"]["attemptId"]), int(task.get("attemptId", 0)))
                if reading is not None and attempt != reading:
                    self.note(
                        f"task {role}[{target.index}] started again (attempt {attempt[0]}.{attempt[1]})"
                    )
                    position = 0
                reading = attempt
                position = self._read_to_end(detail, role, task, position)
            elif not follow:
                self.note(
                    f"task {role}[{target.index}] has not started yet ({job_state}); use -f to wait for it."
                )
            elif not ended:
                # Said once, and again when the reason changes: what it waits for, not silence.
                reason = detail["jobStatus"].get("pendingReason") or ""
                said = f"task {role}[{target.index}] has not started yet ({job_state}" + (
                    f": {reason})" if reason else ")"
                )
                if said != waiting_said:
                    self.note(f"{said}; its log follows once it starts")
                    waiting_said = said
            # The state was read before the log: once it said ended, what was read is the whole log.
            if not follow or ended:
                return
            self.sleep(interval)
