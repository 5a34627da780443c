"""Liveness of every service: a heartbeat on `pai.health.<service>` every few seconds.

Each service runs `beat_forever` beside its main loop; the monitor and the alerter note when
each service was last heard, so a service that hangs or dies is reported down even though it
cannot say so itself. Publishing is fire-and-forget on core NATS: while the bus is away the
beats are simply missed, which is the truth about that service's reachability.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket

import nats.errors
import structlog
from nats.aio.client import Client as NATS

from libs.protocol.telemetry import Heartbeat, health_subject

log = structlog.get_logger(__name__)


def instance_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


async def beat_forever(
    nc: NATS, service: str, stop: asyncio.Event, every: float = 5.0, *, instance: str | None = None
) -> None:
    """Publish a heartbeat for ``service`` now and every ``every`` seconds until ``stop`` is set."""
    subject = health_subject(service)
    who = instance or instance_name()
    while not stop.is_set():
        try:
            await nc.publish(subject, Heartbeat(service=service, instance=who).model_dump_json().encode())
        except (nats.errors.Error, OSError) as exc:
            log.debug("heartbeat not sent", service=service, error=str(exc))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)
