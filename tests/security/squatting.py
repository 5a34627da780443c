"""A stand-in for a task that lies in wait for the platform's traffic on this machine.

It runs as a forked process that, under a root test, becomes ``nobody`` first (tasks run as
other users) and keeps none of the test's descriptors (a task inherits none of the platform's
sockets). It tries to connect to each Unix socket it is given and to remove it, then takes each
TCP port on 127.0.0.1 as soon as the port is free (a service restarting), and for as long as it
holds one, accepts every connection, greets it as a NATS server would (in plain text, saying no
TLS is needed, so a plain client would answer with its CONNECT and password), and keeps all it
receives. Its report comes back through a pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import multiprocessing
import os
import pwd
import selectors
import socket
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

GREETING = b'INFO {"server_id":"squatter","auth_required":true,"tls_required":false}\r\n'


@dataclass
class Report:
    uid: int = -1
    # port -> seconds after the start at which it was bound
    bound: dict[int, float] = field(default_factory=dict)
    # socket path -> what connecting (and removing) it did
    sockets: dict[str, str] = field(default_factory=dict)
    # (port, everything one connection sent)
    received: list[tuple[int, bytes]] = field(default_factory=list)


def _become_a_stranger(keep: int) -> None:
    os.closerange(3, keep)
    os.closerange(keep + 1, min(os.sysconf("SC_OPEN_MAX"), 1 << 16))
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.setgroups([])
        os.setgid(nobody.pw_gid)
        os.setuid(nobody.pw_uid)


def _try_sockets(paths: list[str]) -> dict[str, str]:
    outcome: dict[str, str] = {}
    for path in paths:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            try:
                sock.connect(path)
                said = "connected"
            except OSError as exc:
                said = errno.errorcode.get(exc.errno or 0, str(exc))
        try:
            os.unlink(path)
            said += ", removed"
        except OSError as exc:
            said += ", " + errno.errorcode.get(exc.errno or 0, str(exc))
        outcome[path] = said
    return outcome


def _squat(ports: list[int], sockets: list[str], within: float, hold: float, out: Connection) -> None:
    _become_a_stranger(out.fileno())
    report = Report(uid=os.geteuid(), sockets=_try_sockets(sockets))
    selector = selectors.DefaultSelector()
    started = time.monotonic()
    waiting = list(ports)
    buffers: dict[socket.socket, tuple[int, bytearray]] = {}
    until = started + within
    while time.monotonic() < until:
        for port in list(waiting):
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            # As servers do: a port whose last server was killed has connections in TIME_WAIT.
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                listener.bind(("127.0.0.1", port))
                listener.listen(64)
            except OSError:
                listener.close()
                continue
            waiting.remove(port)
            report.bound[port] = time.monotonic() - started
            selector.register(listener, selectors.EVENT_READ, port)
            until = max(until, time.monotonic() + hold)
        for key, _ in selector.select(timeout=0.001):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if key.data is not None:  # a listener: its port
                try:
                    conn, _ = sock.accept()
                except OSError:
                    continue
                with contextlib.suppress(OSError):
                    conn.sendall(GREETING)
                buffers[conn] = (key.data, bytearray())
                selector.register(conn, selectors.EVENT_READ, None)
                continue
            try:
                chunk = sock.recv(65536)
            except OSError:
                chunk = b""
            if chunk:
                buffers[sock][1].extend(chunk)
            else:
                selector.unregister(sock)
                sock.close()
    for port, data in buffers.values():
        report.received.append((port, bytes(data)))
    out.send(report)
    out.close()


class Squatter:
    """``Squatter(ports, sockets, within, hold).start()``, then ``await report()``."""

    def __init__(self, ports: list[int], sockets: list[str], within: float, hold: float = 0.0) -> None:
        context = multiprocessing.get_context("fork")
        self._in, out = context.Pipe(duplex=False)
        self._process = context.Process(target=_squat, args=(ports, sockets, within, hold, out), daemon=True)
        self._out = out

    def start(self) -> Squatter:
        self._process.start()
        self._out.close()
        return self

    async def report(self) -> Report:
        report = await asyncio.to_thread(self._in.recv)
        await asyncio.to_thread(self._process.join, 10)
        self._in.close()
        assert isinstance(report, Report)
        return report

    def kill(self) -> None:
        if self._process.is_alive():
            self._process.kill()
            self._process.join(5)
