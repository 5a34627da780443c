"""The alerter service's composition root: the bus, the heartbeat, and one replica that leads
through the lease `alerter` in KV (libs/backbone/leasing.py), running an alerter (handlers.py)
whenever it holds the lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable

import structlog
from nats.errors import Error as NatsError

from libs.backbone.connecting import Bus, connect, open_bucket
from libs.backbone.heartbeats import beat_forever
from libs.backbone.leasing import Lease, while_leading
from libs.backbone.settings import BackboneSettings
from libs.backbone.topology import LEASES, ensure_topology
from services.alerter.handlers import Alerter

log = structlog.get_logger(__name__)

# The key of the replicas' lease in KV PAI_LEASES.
LEASE_KEY = "alerter"


class AlerterSettings(BackboneSettings):
    service_name: str = "alerter"
    external_url: str = ""
    heartbeat_every: float = 5.0
    # This replica's name in the lease (a replica restarted under its name leads again at once).
    instance: str = socket.gethostname()


async def replica(bus: Bus, instance: str, stop: asyncio.Event, build: Callable[[Lease], Alerter]) -> None:
    """One replica until `stop`: it stands by, and whenever it holds the lease an alerter made
    by `build` rebuilds (from what the last leader logged), evaluates and notifies."""

    async def lead(turn: asyncio.Event, lease: Lease) -> None:
        log.info("alerter leading", instance=instance, epoch=lease.epoch)
        alerter = build(lease)
        try:
            await alerter.start(turn, provision=False)
            await alerter.run(turn)
        except (NatsError, TimeoutError) as exc:  # the rebuild cut short by the bus: stand by again
            log.warning("alerter turn ended by the bus; standing by", error=str(exc) or type(exc).__name__)
        finally:
            await alerter.close()

    leases = await open_bucket(bus.js, LEASES.bucket)
    await while_leading(leases, LEASE_KEY, instance, lead, stop)


async def main(settings: AlerterSettings, stop: asyncio.Event) -> None:
    async with contextlib.AsyncExitStack() as stack:  # stopped in reverse: stop, the tasks, the bus
        bus = await connect(settings)
        stack.push_async_callback(bus.close)
        # A background task that raises ends the service with its error (its supervisor starts
        # it again) instead of failing unseen.
        background = await stack.enter_async_context(asyncio.TaskGroup())
        stack.callback(stop.set)
        background.create_task(
            beat_forever(bus.nc, "alerter", stop, settings.heartbeat_every), name="heartbeat"
        )
        await ensure_topology(bus.js, settings.stream_replicas)
        await replica(
            bus,
            settings.instance,
            stop,
            lambda lease: Alerter(bus, external_url=settings.external_url, lease=lease),
        )
