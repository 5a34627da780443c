"""A warm runtime that forks one child per task: ``python -S -m runtime.forkserver FD [DATA_DIR]``.

Starting a task as a new interpreter (``python -S -m runtime --spec FILE``) costs the task most of
its CPU before the user's command runs: the interpreter's own start and the runtime's imports,
every time. This process pays for them once. It has imported the runtime, and forks a child for
each task that the local executor asks for; the child runs the runtime's ``main`` exactly as the
new interpreter would, and its pages are shared with this process until either writes them.

It talks to the executor over the ``SOCK_SEQPACKET`` socket ``FD`` (one message per datagram;
DATA_DIR only names the platform this server belongs to, for ``ps`` and the benches):

- ``{"spec": FILE, "cwd": DIR}`` with two descriptors attached: the task's lock (the child holds
  it for as long as it lives, as a spawned runtime does) and the file its output goes to;
- replies, in the order the requests came: ``{"started": PID}`` or ``{"error": TEXT}``;
- when a child ends, ``{"exited": PID, "returncode": CODE}``, CODE as ``Popen.returncode`` gives it
  (negative for a signal).

The child is in its own session (``setsid``), as a spawned runtime is, so it outlives this
server and the orchestrator alike. This server ends when the executor's end of the socket closes
(the orchestrator stopped or died); its children are then reparented and go on, and a restarted
orchestrator adopts them by their locks, as it adopts spawned ones.

Nothing here runs threads: forking a process with threads is unsafe, and the runtime's own
threads (the log pumps) start in the child.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import signal
import socket
import sys
import traceback

from setproctitle import setproctitle

from runtime import exitcodes
from runtime.__main__ import main
from runtime.processes import runtime_command

_MAX_MESSAGE = 1 << 16
_MAX_FDS = 2


def _send(sock: socket.socket, message: dict[str, object]) -> bool:
    """Send one message; False when the executor is gone."""
    try:
        sock.send(json.dumps(message).encode())
    except OSError:
        return False
    return True


def _run_child(
    sock: socket.socket, wake: tuple[int, int], request: dict[str, str], out: int, settled: int
) -> None:
    """In the forked child: become a task's runtime, and never return. `settled` is closed once
    the child is in its own session and named: what the executor is told of it holds from then."""
    code = exitcodes.INTERNAL_ERROR
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sock.close()
        for fd in wake:
            os.close(fd)
        os.setsid()
        # Named as a spawned runtime is, for `ps` and for whoever looks for a task by its spec.
        setproctitle(" ".join(runtime_command(request["spec"])))
        os.close(settled)
        os.chdir(request["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        # The task's lock stays open here and is not passed on to the command: the runtime
        # holds it for its whole life, exactly as a spawned runtime holds the one passed to it.
        code = main(["--spec", request["spec"]])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else exitcodes.INTERNAL_ERROR
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)


def _fork(sock: socket.socket, wake: tuple[int, int], data: bytes, fds: list[int]) -> dict[str, object]:
    try:
        request = json.loads(data)
        if len(fds) != _MAX_FDS or not isinstance(request, dict):
            return {"error": f"a request needs a JSON object and {_MAX_FDS} descriptors"}
        _lock, out = fds
        sys.stdout.flush()
        sys.stderr.flush()
        settling, settled = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(settling)
            _run_child(sock, wake, request, out, settled)
        os.close(settled)
        try:
            os.read(settling, 1)  # end of file: the child has settled (or died)
        finally:
            os.close(settling)
        return {"started": pid}
    except (OSError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        for fd in fds:
            os.close(fd)


def _reap(sock: socket.socket) -> bool:
    """Report every child that ended; False when the executor is gone."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return True
        if not _send(sock, {"exited": pid, "returncode": os.waitstatus_to_exitcode(status)}):
            return False


def _preload() -> None:
    """What a runtime imports only once its command has failed (the failure rules, and with them
    pydantic and PyYAML), loaded here once: a failed task's explanation then costs no imports.
    ctypes too, which every host task's runtime needs (reaping.become_subreaper)."""
    import ctypes  # noqa: F401  (each host task's runtime becomes its processes' reaper with it)

    from libs.failures import default_rules

    default_rules()


def serve(sock: socket.socket) -> None:
    _preload()
    wake = os.pipe()
    for fd in wake:
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake[1])
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)  # the wake-up fd says it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the orchestrator says when to stop: EOF
    # What start-up made lives as long as the server and every child: out of the collector's
    # sight, it is neither walked by their collections nor written to (which would copy the page).
    gc.freeze()
    if not _send(sock, {"ready": os.getpid()}):
        return
    while True:
        readable, _, _ = select.select([sock.fileno(), wake[0]], [], [])
        if wake[0] in readable:
            while True:
                try:
                    if not os.read(wake[0], 512):
                        break
                except BlockingIOError:
                    break
            if not _reap(sock):
                return
        if sock.fileno() in readable:
            data, fds, _flags, _addr = socket.recv_fds(sock, _MAX_MESSAGE, _MAX_FDS)
            if not data:
                for fd in fds:
                    os.close(fd)
                return  # the executor closed its end: it stopped, or died
            if not _send(sock, _fork(sock, wake, data, fds)):
                return


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or not sys.argv[1].isdigit():
        sys.stderr.write("usage: python -m runtime.forkserver FD [DATA_DIR]\n")
        sys.exit(2)
    serve(socket.socket(fileno=int(sys.argv[1])))
