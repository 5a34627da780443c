"""The local executor's side of the runtime's fork server (runtime/forkserver.py).

`ForkServer.start` spawns ``python -S -m runtime.forkserver`` once, in its own session and with
the environment every task's runtime gets; `spawn` asks it to fork a task's runtime and returns
the child's pid and a future of its return code. Requests go out with the task's lock and output
file attached (SCM_RIGHTS), replies come back in the same order, and each child's end comes back
as the server reaps it.

When the server is gone (killed, or it failed), every pending request and every awaited end fails
with `ForkServerLost`: the executor then starts tasks as new interpreters again, and watches the
ones the server had forked by their locks, as it watches tasks adopted after a restart.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import socket
import subprocess
import sys
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

READY_TIMEOUT_S = 30.0
FORK_SERVER_MODULE = "runtime.forkserver"


Forked = tuple[int, "asyncio.Future[int]"]
"""A forked task's pid, and the future of its return code."""


class ForkServerLost(Exception):
    """The fork server ended (or never came up): what was asked of it has no answer."""


class ForkServer:
    def __init__(self, env: dict[str, str], data_dir: Path) -> None:
        self._env = env
        self._data_dir = data_dir
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._ready: asyncio.Future[int] | None = None
        self._replies: collections.deque[asyncio.Future[Forked]] = collections.deque()
        self._exits: dict[int, asyncio.Future[int]] = {}
        self._blocked: set[asyncio.Future[None]] = set()  # sends waiting for the socket
        self._lost: ForkServerLost | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def alive(self) -> bool:
        return self._sock is not None and self._lost is None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            # Once per executor, and subprocess's vfork takes a fraction of a millisecond.
            self._proc = subprocess.Popen(  # noqa: ASYNC220
                [sys.executable, "-S", "-m", FORK_SERVER_MODULE, str(theirs.fileno()), str(self._data_dir)],
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
                env=self._env,
            )
        except OSError as exc:
            ours.close()
            raise ForkServerLost(f"the fork server could not start: {exc}") from exc
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock = ours
        self._ready = loop.create_future()
        loop.add_reader(ours.fileno(), self._readable)
        try:
            pid = await asyncio.wait_for(asyncio.shield(self._ready), READY_TIMEOUT_S)
        except TimeoutError:
            self._lose("the fork server did not come up")
            raise ForkServerLost("the fork server did not come up") from None
        log.info("fork server ready", pid=pid)

    async def spawn(self, spec_file: Path, cwd: Path, lock: int, out: int) -> Forked:
        """Fork a task's runtime; its pid, and a future of its return code."""
        sock = self._sock
        if sock is None or self._lost is not None:
            raise self._lost or ForkServerLost("the fork server is not running")
        loop = asyncio.get_running_loop()
        request = json.dumps({"spec": str(spec_file), "cwd": str(cwd)}).encode()
        while True:
            try:
                socket.send_fds(sock, [request], [lock, out])
                break
            except BlockingIOError:
                await self._writable(sock)  # raises ForkServerLost if the server is lost meanwhile
            except OSError as exc:
                self._lose(f"the fork server's socket failed: {exc}")
                raise self._lost or ForkServerLost(str(exc)) from exc
        reply: asyncio.Future[Forked] = loop.create_future()
        self._replies.append(reply)
        return await reply

    async def _writable(self, sock: socket.socket) -> None:
        """Until the socket takes more; `_lose` fails the wait (it removes the writer itself)."""
        loop = asyncio.get_running_loop()
        writable: asyncio.Future[None] = loop.create_future()

        def ready() -> None:
            if not writable.done():
                writable.set_result(None)

        loop.add_writer(sock.fileno(), ready)
        self._blocked.add(writable)
        try:
            await writable
        finally:
            self._blocked.discard(writable)
            if self._lost is None:
                loop.remove_writer(sock.fileno())

    def _readable(self) -> None:
        assert self._sock is not None
        while True:
            try:
                data = self._sock.recv(1 << 16)
            except BlockingIOError:
                return
            except OSError as exc:
                self._lose(f"the fork server's socket failed: {exc}")
                return
            if not data:
                self._lose("the fork server ended")
                return
            self._handle(json.loads(data))

    def _handle(self, message: dict[str, object]) -> None:
        loop = asyncio.get_running_loop()
        if "exited" in message:
            waiter = self._exits.pop(int(message["exited"]), None)  # type: ignore[call-overload]
            if waiter is not None and not waiter.done():
                waiter.set_result(int(message["returncode"]))  # type: ignore[call-overload]
        elif "ready" in message:
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(int(message["ready"]))  # type: ignore[call-overload]
        elif self._replies:
            reply = self._replies.popleft()
            if "started" in message:
                pid = int(message["started"])  # type: ignore[call-overload]
                # Registered before the next message is read: the child's end may be the next one.
                exited: asyncio.Future[int] = loop.create_future()
                self._exits[pid] = exited
                if not reply.done():
                    reply.set_result((pid, exited))
            elif not reply.done():
                reply.set_exception(OSError(f"the fork server could not fork: {message.get('error')}"))

    def _lose(self, why: str, *, quiet: bool = False) -> None:
        if self._lost is not None:
            return
        self._lost = ForkServerLost(why)
        if not quiet:
            log.warning("fork server lost; tasks start as new processes", why=why)
        sock = self._sock
        loop = asyncio.get_running_loop()
        if sock is not None:
            loop.remove_reader(sock.fileno())
            loop.remove_writer(sock.fileno())
            sock.close()
        proc = self._proc
        if proc is not None and proc.poll() is None and not quiet:
            # Its socket failed while it lives: it cannot be told anything more, so it is ended.
            proc.kill()
            loop.run_in_executor(None, proc.wait)
        for future in [self._ready, *self._replies, *self._exits.values(), *self._blocked]:
            if future is not None and not future.done():
                future.set_exception(self._lost)
                future.exception()  # retrieved here: nobody may be awaiting it
        self._replies.clear()
        self._exits.clear()

    async def close(self) -> None:
        """Stop the server (its children go on; a restarted orchestrator adopts them)."""
        if self._sock is not None and self._lost is None:
            self._lose("the executor closed", quiet=True)
        proc = self._proc
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(proc.wait, 10)
            if proc.poll() is None:
                proc.kill()
                await asyncio.to_thread(proc.wait)
