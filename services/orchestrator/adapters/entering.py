"""Exec in a running task: the orchestrator's side of `pai job exec`, served on a Unix socket.

REST authorizes the caller and passes its WebSocket on to this socket (``PAI_ORCHESTRATOR_SOCKET``;
`pai up` puts it in its private sockets directory, which only the platform's user may enter, so
only the platform's services connect). For each exec this module finds the task's live directory
(its runtime holds the task's lock, see local.py), starts ``python -S -m runtime.entering`` there
with a pseudo-terminal or pipes (runtime/entering.py enters the task: its cgroups, namespaces or
container, user, work dir and environment), and relays the messages of ``libs/web/exec_stream.py``:
input, resizes and the end of input from the socket; output, then the exit code, to it.

The exec ends with its command. When the socket closes first, or the task ends, the exec's
session is hung up (SIGHUP, as a terminal closing does) and killed after a grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import re
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import structlog
from aiohttp import WSMsgType, web

from libs.protocol.subjects import SubjectError, check_id
from libs.web.exec_stream import STDERR, STDIN, STDOUT, command_problem, control, data_frame, read_control
from runtime.exitcodes import from_returncode
from services.orchestrator.adapters.local import child_exit, lock_is_held
from services.orchestrator.adapters.specs import SPEC_FILE, latest_task_dir

log = structlog.get_logger(__name__)

EXEC_PATH = "/exec"
MAX_EXECS = 64
"""Execs at once on this node: each holds a process, a terminal or three pipes, and a socket."""
HANGUP_GRACE_S = 2.0
DRAIN_S = 1.0
"""After the command ends, how long what it left running may still write to its output."""
READ_BYTES = 64 * 1024
_ROLE = re.compile(r"^[A-Za-z0-9_]+$")
_ACTIVE: web.AppKey[set[asyncio.Task[Any]]] = web.AppKey("execs_active", set)


@dataclass(frozen=True)
class ExecSettings:
    data_dir: Path
    env: Callable[[], Mapping[str, str]]
    """The helper's environment: the runtime's (the host's passed variables and PYTHONPATH)."""
    poll_s: float = 0.5


@dataclass
class Running:
    """One exec's process and the descriptors this side holds for it."""

    process: subprocess.Popen[bytes]
    input_fd: int | None
    outputs: list[tuple[int, int]]
    """(descriptor, channel) pairs to read."""
    terminal: int | None = None
    held: list[int] = field(default_factory=list)

    def close(self) -> None:
        for fd in self.held:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.held.clear()


def find_live_task(data_dir: Path, job_id: str, role: str, index: int) -> tuple[Path | None, bool]:
    """The directory of the task's running attempt, newest first, and whether it ever started here."""
    job = data_dir / "jobs" / job_id
    attempts = sorted((int(p.name[8:]) for p in job.glob("attempt-*") if p.name[8:].isdigit()), reverse=True)
    started = False
    for attempt in attempts:
        directory = latest_task_dir(data_dir, job_id, attempt, role, index)
        if directory is None:
            continue
        started = True
        if lock_is_held(directory):
            return directory, True
    return None, started


def set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def start_entry(
    directory: Path, command: list[str], env: Mapping[str, str], *, tty: bool, rows: int, cols: int
) -> Running:
    """The helper that enters the task, in a session of its own (its process group is the exec's)."""
    argv = [sys.executable, "-S", "-m", "runtime.entering", "--spec", str(directory / SPEC_FILE)]
    argv += [*(["--tty"] if tty else []), "--", *command]
    if tty:
        terminal, child = os.openpty()
        try:
            set_size(terminal, rows, cols)
            process = subprocess.Popen(
                argv,
                stdin=child,
                stdout=child,
                stderr=child,
                cwd=directory,
                env=dict(env),
                start_new_session=True,
            )
        except BaseException:
            os.close(terminal)
            raise
        finally:
            os.close(child)
        os.set_blocking(terminal, False)
        return Running(process, terminal, [(terminal, STDOUT)], terminal, [terminal])
    pipes = [os.pipe() for _ in range(3)]
    try:
        process = subprocess.Popen(
            argv,
            stdin=pipes[0][0],
            stdout=pipes[1][1],
            stderr=pipes[2][1],
            cwd=directory,
            env=dict(env),
            start_new_session=True,
        )
    except BaseException:
        for read, write in pipes:
            os.close(read)
            os.close(write)
        raise
    for fd in (pipes[0][0], pipes[1][1], pipes[2][1]):
        os.close(fd)
    ours = [pipes[0][1], pipes[1][0], pipes[2][0]]
    for fd in ours:
        os.set_blocking(fd, False)
    return Running(process, pipes[0][1], [(pipes[1][0], STDOUT), (pipes[2][0], STDERR)], None, ours)


async def _ready(fd: int, writing: bool = False) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    (loop.add_writer if writing else loop.add_reader)(fd, wake)
    try:
        await ready
    finally:
        (loop.remove_writer if writing else loop.remove_reader)(fd)


async def read_some(fd: int) -> bytes:
    """What the descriptor has, once it has something; b"" at its end (EIO: a terminal nobody holds)."""
    while True:
        try:
            return os.read(fd, READ_BYTES)
        except BlockingIOError:
            await _ready(fd)
        except OSError as exc:
            if exc.errno == errno.EIO:
                return b""
            raise


async def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            await _ready(fd, writing=True)


async def _pump(fd: int, channel: int, ws: web.WebSocketResponse) -> None:
    with contextlib.suppress(ConnectionError, RuntimeError):
        while data := await read_some(fd):
            await ws.send_bytes(data_frame(channel, data))


async def _feed(ws: web.WebSocketResponse, running: Running) -> None:
    """The client's messages to the command, until the socket closes."""
    async for message in ws:
        if message.type == WSMsgType.BINARY:
            data = bytes(message.data)
            if data[:1] == bytes([STDIN]) and running.input_fd is not None and len(data) > 1:
                # OSError: the command no longer reads (EPIPE; EIO: its terminal is gone).
                with contextlib.suppress(OSError):
                    await write_all(running.input_fd, data[1:])
        elif message.type == WSMsgType.TEXT:
            said = read_control(str(message.data)) or {}
            if said.get("type") == "resize" and running.terminal is not None:
                with contextlib.suppress(OSError, TypeError, ValueError, struct.error):
                    set_size(running.terminal, int(said["rows"]), int(said["cols"]))
            elif said.get("type") == "eof" and running.input_fd is not None:
                if running.terminal is not None:
                    with contextlib.suppress(OSError):
                        await write_all(running.terminal, b"\x04")
                else:
                    running.held.remove(running.input_fd)
                    os.close(running.input_fd)
                    running.input_fd = None


async def _task_ends(directory: Path, poll_s: float) -> None:
    while lock_is_held(directory):  # noqa: ASYNC110 - the runtime is not ours to wait on
        await asyncio.sleep(poll_s)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


def _signal_all(helper: subprocess.Popen[bytes], below: list[psutil.Process], signum: int) -> None:
    """The exec's process group and the processes below its helper: a shell in a sandbox has a
    session of its own there (runtime/entering.py), out of the group's reach. The group only
    while the helper is not reaped: its number is then nobody else's."""
    if helper.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(helper.pid, signum)
    for process in below:
        with contextlib.suppress(psutil.Error):
            process.send_signal(signum)  # psutil checks it is still the process it found


async def relay(ws: web.WebSocketResponse, running: Running, directory: Path, poll_s: float) -> int:
    """Between the socket and the command until it ends; its exit code (128 + N after signal N)."""
    process = running.process
    pumps = [asyncio.create_task(_pump(fd, channel, ws)) for fd, channel in running.outputs]
    exited = asyncio.create_task(child_exit(process, poll_s))
    feeding = asyncio.create_task(_feed(ws, running))
    watching = asyncio.create_task(_task_ends(directory, poll_s))
    try:
        done, _ = await asyncio.wait({exited, feeding, watching}, return_when=asyncio.FIRST_COMPLETED)
        if exited in done:
            await asyncio.wait(pumps, timeout=DRAIN_S)
        else:
            if watching in done:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    await ws.send_bytes(data_frame(STDERR, b"\r\npai exec: the task has ended\r\n"))
            below = _descendants(process.pid)
            _signal_all(process, below, signal.SIGHUP)
            _signal_all(process, below, signal.SIGCONT)
            await asyncio.wait([exited], timeout=HANGUP_GRACE_S)
            _signal_all(process, [p for p in below if p.is_running()], signal.SIGKILL)
        return from_returncode(await exited)
    finally:
        if process.returncode is None:
            _signal_all(process, _descendants(process.pid), signal.SIGKILL)
        for task in (*pumps, feeding, watching):
            task.cancel()
        await asyncio.gather(*pumps, feeding, watching, return_exceptions=True)
        if not exited.done():
            exited.cancel()
            await asyncio.gather(exited, return_exceptions=True)
        running.close()


def _query(request: web.Request) -> tuple[str, str, int, list[str], bool, int, int]:
    """The exec's parameters; ValueError saying which one is wrong."""
    query = request.query
    try:
        job_id = check_id(query.get("job_id", ""), "job_id")
    except SubjectError as exc:
        raise ValueError(str(exc)) from None
    role = query.get("role", "")
    if not _ROLE.fullmatch(role):
        raise ValueError(f"role {role!r} is not a task role's name")
    if not query.get("index", "").isdigit():
        raise ValueError("index must be a task's index (0, 1, ...)")
    index = int(query["index"])
    rows, cols = (int(query.get(name, default)) for name, default in (("rows", 24), ("cols", 80)))
    if index < 0 or not (0 < rows < 10_000 and 0 < cols < 10_000):
        raise ValueError("index, rows and cols must be positive")
    command = query.getall("command", [])
    problem = command_problem(command)
    if problem:
        raise ValueError(problem)
    return job_id, role, index, command, query.get("tty", "").lower() == "true", rows, cols


async def _refuse(ws: web.WebSocketResponse, status: int, message: str) -> web.WebSocketResponse:
    await ws.send_str(control("error", status=status, message=message))
    await ws.close()
    return ws


def exec_handler(settings: ExecSettings) -> Callable[[web.Request], Any]:
    async def exec_in_task(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        try:
            job_id, role, index, command, tty, rows, cols = _query(request)
        except ValueError as exc:
            return await _refuse(ws, 400, f"invalid exec request: {exc}")
        directory, started = await asyncio.to_thread(find_live_task, settings.data_dir, job_id, role, index)
        if directory is None:
            why = "has ended" if started else "has not started on this node"
            return await _refuse(ws, 409, f"task {role}[{index}] is not running: it {why}")
        active = request.app[_ACTIVE]
        if len(active) >= MAX_EXECS:
            return await _refuse(ws, 503, f"this node runs {MAX_EXECS} execs already; try again later")
        try:
            running = start_entry(directory, command, settings.env(), tty=tty, rows=rows, cols=cols)
        except OSError as exc:
            return await _refuse(ws, 500, f"the exec could not start: {exc}")
        this = asyncio.current_task()
        assert this is not None
        active.add(this)
        log.info("exec started", job_id=job_id, role=role, index=index, tty=tty, pid=running.process.pid)
        try:
            await ws.send_str(control("started"))
            code = await relay(ws, running, directory, settings.poll_s)
            log.info("exec ended", job_id=job_id, role=role, index=index, code=code)
            with contextlib.suppress(ConnectionError, RuntimeError):
                await ws.send_str(control("exit", code=code))
            await ws.close()
        finally:
            active.discard(this)
        return ws

    return exec_in_task


def exec_app(settings: ExecSettings) -> web.Application:
    app = web.Application()
    app[_ACTIVE] = set()
    app.router.add_get(EXEC_PATH, exec_handler(settings))
    return app
