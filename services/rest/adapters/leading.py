"""One REST replica at a time projects the job stream into SQL; every replica serves the API.

The projection reads a job's row and writes what an event makes of it. Two replicas sharing the
durable consumer would each get some of one job's events and apply them concurrently, in two
transactions: a `task.started` applied after the job's `job.completed` by the other replica
set a finished job RUNNING again, for good. So the projection leads through a lease in KV, as
the scheduler does (libs/backbone/leasing.py): the other replica stands by and takes over when
the lease is free; what the leader had taken and not acknowledged is delivered again (the
projection is idempotent: applied event ids are stored with what they wrote).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from libs.backbone.connecting import Bus, open_bucket
from libs.backbone.leasing import while_leading
from libs.backbone.topology import LEASES

LEASE_KEY = "rest-projection"


async def project_while_leading(
    bus: Bus, instance: str, project: Callable[[asyncio.Event], Awaitable[None]], stop: asyncio.Event
) -> None:
    """Run `project(turn)` whenever this replica holds the lease, until `stop`; a lost lease ends
    the turn (`turn` is set) and the replica stands by again."""
    kv = await open_bucket(bus.js, LEASES.bucket)
    await while_leading(kv, LEASE_KEY, instance, lambda turn, _lease: project(turn), stop)
