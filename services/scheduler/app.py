"""The scheduler service's composition root: the bus, its heartbeat, and one leader at a time.

One instance leads (the lease `scheduler` in KV); a standby takes over when the lease is free.
A new leader raises a fence before it reads the stream, then runs a SchedulerService
(handlers.py) over a core built from the stored configuration (adapters/control.py) until its
turn ends; a leader that lost its lease stands by again in the same process.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

import structlog
from nats.errors import Error as NatsError
from pydantic import Field

from libs.backbone.connecting import connect, open_bucket
from libs.backbone.fencing import Deposed, FenceReader, raise_fence
from libs.backbone.heartbeats import beat_forever
from libs.backbone.settings import BackboneSettings, SettingsError
from libs.backbone.topology import FENCES, LEASES, SCHEDULER_CONFIG, ensure_topology
from services.scheduler.adapters.control import Control, file_config, initial_config
from services.scheduler.adapters.leasing import Lease, while_leading
from services.scheduler.core.hived import HivedPolicy
from services.scheduler.core.placements import PlacementPolicy
from services.scheduler.core.queueing import MAX_JOB_TASKS, SchedulerCore
from services.scheduler.core.reconfigure import ReconfigurationError
from services.scheduler.core.reconfigure import build_policy as policy_for
from services.scheduler.handlers import SchedulerService

log = structlog.get_logger(__name__)


class SchedulerSettings(BackboneSettings):
    service_name: str = "scheduler"
    instance: str = socket.gethostname()
    hived_config: Path | None = None
    # The most tasks the scheduler places for one job (PAI_MAX_JOB_TASKS); a larger job fails at once.
    max_job_tasks: int = Field(default=MAX_JOB_TASKS, ge=1)


def build_policy(settings: SchedulerSettings) -> PlacementPolicy:
    """HiveD over the configured cells, or over one "default" VC derived from the nodes."""
    return HivedPolicy(file_config(settings.hived_config))


async def main(settings: SchedulerSettings, stop: asyncio.Event) -> None:
    """Stand by until this instance holds the lease `scheduler`, then lead: raise the fence,
    rebuild from the streams and decide, until the lease is lost or `stop`. A leader that lost
    its lease stands by again in the same process, connected and provisioned: the next leader's
    loss finds it warm, not restarting."""
    async with contextlib.AsyncExitStack() as stack:  # stopped in reverse: stop, the tasks, the bus
        bus = await connect(settings)
        stack.push_async_callback(bus.close)
        # A background task that raises ends the service with its error (its supervisor starts
        # it again) instead of failing unseen.
        background = await stack.enter_async_context(asyncio.TaskGroup())
        stack.callback(stop.set)
        background.create_task(beat_forever(bus.nc, settings.service_name, stop), name="heartbeat")
        await ensure_topology(bus.js, settings.stream_replicas)
        fences_kv = await open_bucket(bus.js, FENCES.bucket)
        config_kv = await open_bucket(bus.js, SCHEDULER_CONFIG.bucket)

        async def lead(turn: asyncio.Event, lease: Lease) -> None:
            assert lease.epoch is not None
            try:
                await raise_fence(bus.js, fences_kv, lease.epoch)
                fences = await FenceReader(fences_kv).fences()
                config, source = await initial_config(config_kv, settings.hived_config)
            except Deposed as err:
                log.warning("deposed before leading", error=str(err))
                return
            except (NatsError, TimeoutError) as exc:  # taking over while the bus elects: later
                log.warning("turn not begun for the bus; standing by", error=str(exc) or type(exc).__name__)
                return
            try:
                core = SchedulerCore(policy_for(config, []), settings.max_job_tasks)
            except ReconfigurationError as err:
                raise SettingsError(f"scheduler config ({source}): {err}") from None
            service = SchedulerService(
                bus,
                core,
                Control(core, config_kv, config, source, asyncio.Lock()),
                epoch=lease.epoch,
                fences=fences,
            )
            log.info("scheduler config", source=source)
            try:
                await service.run(turn)
            except (NatsError, TimeoutError) as exc:  # the rebuild cut short by the bus
                log.warning("turn ended by the bus; standing by", error=str(exc) or type(exc).__name__)
                return
            if not stop.is_set():
                log.warning("lease lost; standing by", epoch=lease.epoch)

        leases = await open_bucket(bus.js, LEASES.bucket)
        await while_leading(leases, "scheduler", settings.instance, lead, stop)
