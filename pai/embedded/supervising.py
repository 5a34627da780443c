"""Keeping child processes alive: start, restart with backoff on a crash, stop together.

Each process of the embedded platform (the bus and every service) is a supervised child with
its own log file. A child that exits while the platform runs is started again after a delay
that doubles on quick repeated crashes (so a broken service does not spin), and resets once it
has stayed up a while. The bus restarts within a second: every service waits on it.

The bus is also restarted when a full disk has wedged it and there is room again (reviving.py):
nats-server keeps failing writes after ENOSPC until it restarts.

Stopping sends SIGTERM to every service at once and waits for them together, then stops the
bus, so the platform is down within one grace period however many services there are; a
child that outlives it is killed. ``kill`` is the second Ctrl-C: SIGKILL to everything now.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import structlog

from libs.backbone.natsserver import EmbeddedNats
from pai.embedded.reviving import CHECK_EVERY, SpaceWatch

log = structlog.get_logger(__name__)

STABLE_AFTER = 30.0  # seconds up after which a crash counts as the first one again
MAX_BACKOFF = 30.0
# The bus comes back within a second of any exit: every service is waiting on it.
NATS_FIRST_DELAY = 0.1
NATS_MAX_DELAY = 0.8
# The bus stops last, once no service needs it; JetStream recovers from a kill anyway.
NATS_STOP_GRACE = 1.0


class Supervised(Protocol):
    """What the supervisor needs of a child: start it, await its exit, stop or kill it."""

    name: str
    restarts: int
    first_delay: float
    max_delay: float

    @property
    def pid(self) -> int | None: ...

    async def start(self) -> None: ...

    async def wait(self) -> int: ...

    async def stop(self, grace: float) -> None: ...

    def kill(self) -> None: ...


PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when this process dies (Linux).

    A `pai up` killed with SIGKILL cannot stop its children; with this, the kernel does, so no
    orphaned bus or service keeps running beside the next `pai up`. The signal follows the
    thread that forked, so children are started from the event loop's thread only. None where
    prctl does not exist.
    """
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


@dataclass
class Child:
    """One supervised service process: its command, environment and log file."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    log_path: Path
    # Descriptors the process inherits at every start: listening sockets the platform holds for
    # it, so its port stays taken while it restarts (pai/embedded/platform.py).
    pass_fds: tuple[int, ...] = ()
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    first_delay: float = 0.5
    max_delay: float = MAX_BACKOFF

    @property
    def pid(self) -> int | None:
        process = self.process
        return None if process is None or process.returncode is not None else process.pid

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
                preexec_fn=die_with_parent(),
                pass_fds=self.pass_fds,
            )
        log.info("service started", service=self.name, pid=self.process.pid)

    async def wait(self) -> int:
        assert self.process is not None
        return await self.process.wait()

    def kill(self) -> None:
        process = self.process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()

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
            self.kill()
            await process.wait()


@dataclass
class NatsChild:
    """The embedded nats-server as a supervised child: same port, same store, back within a second.

    With ``space``, its exit is also brought about: once the server has met a full disk and
    there is room again, it is stopped, and the supervisor starts it again as after any exit.
    """

    server: EmbeddedNats
    name: str = "nats"
    restarts: int = 0
    first_delay: float = NATS_FIRST_DELAY
    max_delay: float = NATS_MAX_DELAY
    ready_within: float = 15.0
    space: SpaceWatch | None = None
    check_every: float = CHECK_EVERY
    # Restarts made because a full disk had wedged the server (a part of ``restarts``).
    revivals: int = 0

    @property
    def pid(self) -> int | None:
        return self.server.pid if self.server.is_running else None

    async def start(self) -> None:
        if self.space is not None:
            self.space.started()
        await self.server.start(self.ready_within)
        log.info("service started", service=self.name, pid=self.server.pid, url=self.server.url)

    async def wait(self) -> int:
        exited = asyncio.ensure_future(self.server.wait())
        try:
            while self.space is not None and not exited.done():
                await asyncio.wait({exited}, timeout=self.check_every)
                reason = None if exited.done() else self.space.restart_because()
                if reason is not None:
                    self.revivals += 1
                    log.warning(
                        "the bus met a full disk and there is room again; restarting it",
                        service=self.name,
                        reason=reason,
                    )
                    await self.server.stop(NATS_STOP_GRACE)
                    break
            return await exited
        finally:
            exited.cancel()  # a cancelled wait (the supervisor stopping) leaves no task behind

    def kill(self) -> None:
        pid = self.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    async def stop(self, grace: float) -> None:
        if self.server.is_running:
            await self.server.stop(min(grace, NATS_STOP_GRACE))


@dataclass
class _Backoff:
    delay: float
    started: float = field(default_factory=time.monotonic)


START_ERRORS: tuple[type[Exception], ...] = (OSError, TimeoutError, RuntimeError)
"""What a child's start raises when the child does not come up: the process cannot be spawned
(OSError), it does not answer in time (TimeoutError), or it says it failed (RuntimeError: the
bus's NatsServerError, the MPS daemon's MpsError)."""


def _watch_ended(watcher: asyncio.Task[None]) -> None:
    if not watcher.cancelled() and (error := watcher.exception()) is not None:
        log.error("a service's watch failed", task=watcher.get_name(), exc_info=error)


class Supervisor:
    """Runs children until `stop`, restarting any that exits; the first child is stopped last.

    The first child is the one the others depend on (the bus): it is started first and stopped
    after every other child has exited.
    """

    def __init__(self, children: Sequence[Supervised], *, grace: float = 2.5) -> None:
        self.children = list(children)
        self.grace = grace
        self._watchers: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        """Start every child in order (one already running, such as a bus started first so that
        the others can be told its port, is only watched)."""
        for child in self.children:
            if child.pid is None:
                await child.start()
            watcher = asyncio.create_task(self._watch(child), name=f"watch-{child.name}")
            watcher.add_done_callback(_watch_ended)
            self._watchers.append(watcher)

    async def _watch(self, child: Supervised) -> None:
        """Restart ``child`` whenever it exits, with a growing pause, until the supervisor stops.
        A start that fails (START_ERRORS) counts as a crash; any other error is a bug of the
        supervisor's and ends the watch with its traceback in the log (``_watch_ended``)."""
        backoff = _Backoff(child.first_delay)
        while not self._stopping.is_set():
            code = await child.wait()
            if self._stopping.is_set():
                return
            if time.monotonic() - backoff.started > STABLE_AFTER:
                backoff.delay = child.first_delay
            log.warning("service exited; restarting", service=child.name, code=code, delay=backoff.delay)
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), backoff.delay)
                if self._stopping.is_set():
                    return
                backoff.delay = min(backoff.delay * 2, child.max_delay)
                child.restarts += 1
                backoff.started = time.monotonic()
                try:
                    await child.start()
                    break
                except START_ERRORS as exc:  # a start that fails is retried like a crash
                    log.warning("service did not start; retrying", service=child.name, error=str(exc))

    def pids(self) -> dict[str, int]:
        """The running children's process ids, by name."""
        return {c.name: pid for c in self.children if (pid := c.pid) is not None}

    async def stop(self) -> None:
        """SIGTERM every child but the first together, wait (killing laggards), then the first."""
        self._stopping.set()
        first, rest = self.children[:1], self.children[1:]
        await asyncio.gather(*(child.stop(self.grace) for child in rest))
        for child in first:
            await child.stop(self.grace)
        for watcher in self._watchers:
            watcher.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)

    def kill(self) -> None:
        """SIGKILL every child now (the second Ctrl-C)."""
        self._stopping.set()
        for child in self.children:
            child.kill()
