"""Connecting a service to NATS JetStream, and staying connected.

A service must survive the bus going away (a restart, a network blip, a leader change in a
cluster): the client reconnects forever, buffers what is published meanwhile, and every
disconnect and reconnect is logged so an operator sees the gap. Closing drains: subscriptions
stop taking new messages, in-flight acks and publishes are flushed, then the socket closes.
With an authority to trust (``PAI_NATS_CA``, the embedded platform) the client verifies the
server's certificate before it says anything (libs/backbone/bustls.py), at every reconnect too.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import nats
import structlog
from nats.aio.client import Client as NATS
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from libs.backbone.bustls import client_options
from libs.backbone.settings import BackboneSettings

log = structlog.get_logger(__name__)

# Seconds between reconnect attempts; short because the embedded server restarts in well under
# a second and every service waits on the bus.
RECONNECT_WAIT = 0.5
# Seconds each stage of a connection (TCP, TLS, the server's INFO, its PONG) may take.
CONNECT_TIMEOUT = 2
# Seconds a first connection may take before its client is given up for a new one: longer than
# its four stages, and nats-py's own retries of an address that refuses go on meanwhile.
FIRST_ATTEMPT_SECONDS = 10.0
# Clients given up while connecting, closed in the background (a close can hang: see below).
_abandoned: set[asyncio.Task[None]] = set()


@dataclass(frozen=True)
class Bus:
    """A live connection: the core client for request/reply, JetStream for streams and KV."""

    nc: NATS
    js: JetStreamContext
    # Set while connected; cleared on a disconnect, set again on reconnect.
    connected: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def is_connected(self) -> bool:
        return bool(self.nc.is_connected)

    async def close(self) -> None:
        """Drain and close; safe to call twice or after the connection was lost for good."""
        if self.nc.is_closed:
            return
        if not self.nc.is_connected:
            # Reconnecting: a drain would wait for a server that may never come back.
            await _close(self.nc)
            return
        try:
            await self.nc.drain()
        except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError):
            pass
        except TimeoutError:
            # The server is gone: nothing left to flush, just release the socket.
            await _close(self.nc)
        if not self.nc.is_closed:
            await _close(self.nc)

    async def __aenter__(self) -> Bus:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


async def _close(nc: NATS, within: float = 5.0) -> None:
    """nats-py's close, bounded: after a failed TLS handshake it waits forever for a socket
    whose protocol the handshake replaced (its socket is closed by then all the same)."""
    with contextlib.suppress(TimeoutError, NatsError, OSError):
        await asyncio.wait_for(nc.close(), within)


def _give_up(nc: NATS, given_up: asyncio.Event) -> None:
    """Close a client given up while connecting, in the background (its attempt was cancelled:
    whatever it had started, a reading task or a socket, ends here), its callbacks silenced."""
    given_up.set()
    task = asyncio.get_running_loop().create_task(_close(nc))
    _abandoned.add(task)
    task.add_done_callback(_abandoned.discard)


def _callbacks(nc: NATS, connected: asyncio.Event, bound: Any, given_up: asyncio.Event) -> dict[str, Any]:
    """The connection-state callbacks of the client `nc`; a client given up says nothing."""

    async def on_disconnected() -> None:
        if given_up.is_set():
            return
        connected.clear()
        if nc.is_closed or nc.is_draining:
            return  # our own close, not an outage
        bound.warning("bus disconnected")

    async def on_reconnected() -> None:
        if not given_up.is_set():
            connected.set()
            bound.info("bus reconnected")

    async def on_closed() -> None:
        if not given_up.is_set():
            bound.info("bus closed")

    return {"disconnected_cb": on_disconnected, "reconnected_cb": on_reconnected, "closed_cb": on_closed}


async def connect(
    settings: BackboneSettings | str,
    *,
    name: str | None = None,
    initial_timeout: float | None = None,
    js_timeout: float = 5.0,
    user: str | None = None,
    password: str | None = None,
    ca: Path | None = None,
) -> Bus:
    """Connect to NATS, retrying until the server answers, and return a :class:`Bus`.

    ``settings`` may be a URL string for tests and tools (``user``, ``password`` and ``ca`` then
    name the NATS user and the authority to verify the server against; with settings, theirs are
    used). ``initial_timeout`` bounds the first
    connection (None: wait for the server forever, as a service started before the bus should);
    after that the client reconnects forever. Raises ``ConnectionError`` when the first
    connection does not succeed in time.
    """
    url = settings if isinstance(settings, str) else settings.nats_url
    client_name = name or (settings.service_name if not isinstance(settings, str) else "pai")
    if not isinstance(settings, str):
        user = settings.nats_user
        password = settings.nats_password.get_secret_value() if settings.nats_password else None
        ca = settings.nats_ca
    bound = log.bind(nats_url=url, client=client_name)

    async def on_error(exc: Exception) -> None:
        # One line per failure, not nats-py's default traceback on every retry.
        bound.warning("bus error", error=f"{type(exc).__name__}: {exc}")

    connected = asyncio.Event()
    ping_interval = 120.0 if isinstance(settings, str) else settings.nats_ping_interval
    options: dict[str, Any] = dict(
        # A cluster's servers, comma-separated; the client learns the others from each too.
        servers=[part.strip() for part in url.split(",") if part.strip()],
        ping_interval=ping_interval,
        max_outstanding_pings=2,
        name=client_name,
        allow_reconnect=True,
        max_reconnect_attempts=-1,
        reconnect_time_wait=RECONNECT_WAIT,
        connect_timeout=CONNECT_TIMEOUT,
        error_cb=on_error,
        user=user,
        password=password if user else None,
        **client_options(ca),
    )
    loop = asyncio.get_running_loop()
    deadline = None if initial_timeout is None else loop.time() + initial_timeout
    while True:
        nc = NATS()
        given_up = asyncio.Event()
        nc_options = {**options, **_callbacks(nc, connected, bound, given_up)}
        limit = FIRST_ATTEMPT_SECONDS
        if deadline is not None:
            limit = max(0.0, min(limit, deadline - loop.time()))
        try:
            await asyncio.wait_for(nc.connect(**nc_options), limit)
            break
        except TimeoutError:
            # nats-py retries a first connection by itself, but after a failed TLS handshake (a
            # process on the bus's port while the bus restarts) it waits forever on that socket:
            # the attempt is given up and a new client tries.
            _give_up(nc, given_up)
            if deadline is not None and loop.time() >= deadline:
                raise ConnectionError(
                    f"no NATS server answered at {url} within {initial_timeout:g}s; "
                    "start one or set PAI_NATS_URL"
                ) from None
            bound.warning("bus not reached yet; trying again with a new connection")
    connected.set()
    bound.info("bus connected")
    return Bus(nc=nc, js=nc.jetstream(timeout=js_timeout), connected=connected)


T = TypeVar("T")


async def patiently(attempt: Callable[[], Awaitable[T]], within: float = 60.0) -> T:
    """`attempt()` again while the bus times out or answers that JetStream is unavailable (a
    NATS server of the cluster going away, its groups electing new leaders), for `within` s."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        try:
            return await attempt()
        except (TimeoutError, NatsError):  # a timeout, no responders, no stream response
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.2)


async def open_bucket(js: JetStreamContext, bucket: str) -> KeyValue:
    """The KV bucket ``bucket`` as a service starts or takes over, `patiently`: the cluster may be
    electing or a server away then (not for a request's path: it would wait a minute)."""
    return await patiently(functools.partial(js.key_value, bucket))
