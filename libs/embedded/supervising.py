"""Keeping child processes alive: start, restart with backoff on a crash, stop in order.

Each service of the embedded platform is a child process with its own log file. A child that
exits while the platform runs is started again after a delay that doubles on quick repeated
crashes (so a broken service does not spin), and resets once it has stayed up a while.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

STABLE_AFTER = 30.0  # seconds up after which a crash counts as the first one again
MAX_BACKOFF = 30.0


@dataclass
class Child:
    """One supervised process: its command, environment and log file."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    log_path: Path
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    _backoff: float = field(default=0.5, repr=False)

    async def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            self.process = await asyncio.create_subprocess_exec(
                *self.argv,
                env={**os.environ, **self.env},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C on the terminal reaches the supervisor only
            )
        log.info("service started", service=self.name, pid=self.process.pid)

    async def stop(self, grace: float) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), grace)
        except TimeoutError:
            log.warning("service did not stop in time; killing it", service=self.name, grace=grace)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


class Supervisor:
    """Runs children until `stop` is set, restarting any that exits."""

    def __init__(self, children: Sequence[Child], *, grace: float = 10.0) -> None:
        self.children = list(children)
        self.grace = grace
        self._watchers: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        for child in self.children:
            await child.start()
            self._watchers.append(asyncio.create_task(self._watch(child), name=f"watch-{child.name}"))

    async def _watch(self, child: Child) -> None:
        while not self._stopping.is_set():
            assert child.process is not None
            started = time.monotonic()
            code = await child.process.wait()
            if self._stopping.is_set():
                return
            if time.monotonic() - started > STABLE_AFTER:
                child._backoff = 0.5
            log.warning("service exited; restarting", service=child.name, code=code, delay=child._backoff)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), child._backoff)
            if self._stopping.is_set():
                return
            child._backoff = min(child._backoff * 2, MAX_BACKOFF)
            child.restarts += 1
            await child.start()

    async def stop(self) -> None:
        """Stop every child, the last started first, then the watchers."""
        self._stopping.set()
        for child in reversed(self.children):
            await child.stop(self.grace)
        for watcher in self._watchers:
            watcher.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
