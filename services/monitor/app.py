"""The monitor service's composition root: the bus, the monitor (handlers.py), its periodic work.

It reports this node (`node.reported`) on start and periodically; samples the node and the
tasks running on it and publishes them on `pai.metrics.<node id>` for the alerter; serves them
to Prometheus on `/metrics`; and watches every node's reports and every service's heartbeats,
publishing `node.lost` for a node silent longer than `node_lost_after`. It also keeps a bounded
history of every node's and task's use, heard on `pai.metrics.*` (core/history.py), and answers
requests for it on `pai.rpc.monitor.metrics` (one monitor of the queue group answers).

Replicas lead the cluster view one at a time through the lease `monitor` in KV
(libs/backbone/leasing.py); see handlers.py.
"""

from __future__ import annotations

import asyncio
import contextlib

from libs.backbone.connecting import connect, open_bucket
from libs.backbone.heartbeats import beat_forever
from libs.backbone.leasing import while_leading
from libs.backbone.topology import LEASES
from services.monitor.handlers import Monitor
from services.monitor.settings import MonitorSettings

# The key of the cluster view's lease in KV PAI_LEASES.
LEASE_KEY = "monitor"


async def serve(monitor: Monitor, stop: asyncio.Event) -> None:
    """A started monitor's periodic work until `stop`: its node reported and sampled, and the
    cluster view whenever it holds the lease (a standby until then)."""
    leases = await open_bucket(monitor.bus.js, LEASES.bucket)
    # One that raises cancels the others and ends the service with its error, for its
    # supervisor to start it again.
    async with asyncio.TaskGroup() as work:
        work.create_task(monitor.report_forever(stop), name="node-report")
        work.create_task(monitor.sample_forever(stop), name="sampling")
        work.create_task(monitor.watch_forever(stop), name="liveness")
        work.create_task(
            beat_forever(monitor.bus.nc, "monitor", stop, monitor.settings.heartbeat_every), name="heartbeat"
        )
        work.create_task(
            while_leading(leases, LEASE_KEY, monitor.settings.instance, monitor.lead, stop), name="leading"
        )


async def main(settings: MonitorSettings, stop: asyncio.Event) -> None:
    async with contextlib.AsyncExitStack() as stack:  # stopped in reverse: the monitor, the bus
        bus = await connect(settings)
        stack.push_async_callback(bus.close)
        monitor = Monitor(bus, settings, leading=False)
        stack.push_async_callback(monitor.close)
        await monitor.start()
        await serve(monitor, stop)
