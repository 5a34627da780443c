"""Two monitor replicas on one nats-server: one speaks for the cluster, so a sum over both
monitors' /metrics counts each node once and a silent node is declared lost by one of them; when
it dies, the other takes the lease over and counts every node itself."""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp

from libs.backbone.connecting import Bus, connect
from libs.backbone.natsserver import EmbeddedNats
from libs.backbone.topology import ensure_topology, publish_event
from libs.protocol.events import NodeReported
from services.alerter.core.timing import FakeClock
from services.monitor.app import serve
from services.monitor.handlers import Monitor
from services.monitor.settings import MonitorSettings
from tests.support.waiting import eventually, polled

NODE_COUNT = re.compile(r'^pai_node_count\{node_name="([^"]+)",ready="(true|false)"\} 1\.0$', re.MULTILINE)


@dataclass
class Replica:
    monitor: Monitor
    bus: Bus
    stop: asyncio.Event
    task: asyncio.Task[None]


@asynccontextmanager
async def replicas(server: EmbeddedNats, clock: FakeClock) -> AsyncIterator[list[Replica]]:
    """monitor-0 on node-a and monitor-1 on node-b, each on its own connection, run as `main` runs
    them (background reports and samples at a pace the test never waits for: it samples itself)."""
    started: list[Replica] = []
    try:
        for index, node in enumerate(("node-a", "node-b")):
            settings = MonitorSettings(
                nats_url=server.url,
                node_name=node,
                instance=f"monitor-{index}",
                metrics_port=0,
                report_every=3600,
                metrics_every=3600,
                node_lost_after=60,
            )
            bus = await connect(server.url, name=settings.instance, initial_timeout=10.0)
            monitor = Monitor(bus, settings, clock=clock.now, leading=False)
            await monitor.start()
            stop = asyncio.Event()
            started.append(Replica(monitor, bus, stop, asyncio.create_task(serve(monitor, stop))))
        yield started
    finally:
        for one in started:
            one.stop.set()
        await asyncio.gather(*(one.task for one in started), return_exceptions=True)
        for one in started:
            await one.monitor.close()
            await one.bus.close()


async def counted(monitors: list[Monitor]) -> Counter[str]:
    """Each node's pai_node_count over every monitor's /metrics, freshly sampled."""
    found: Counter[str] = Counter()
    async with aiohttp.ClientSession() as session:
        for monitor in monitors:
            await monitor.sample_once()
            async with session.get(f"http://127.0.0.1:{monitor.port}/metrics") as reply:
                found.update(name for name, _ in NODE_COUNT.findall(await reply.text()))
    return found


async def test_two_monitors_count_each_node_once_and_the_standby_takes_over_from_a_dead_leader(
    nats_server: EmbeddedNats, bus: Bus
) -> None:
    await ensure_topology(bus.js)
    clock = FakeClock(start=time.time())
    async with replicas(nats_server, clock) as both:
        await publish_event(
            bus.js,
            NodeReported(node_id="n-c", name="node-c", address="10.0.0.3", cpu=8, memory_mb=4096, gpus=0),
        )
        monitors = [one.monitor for one in both]
        # Both have heard all three nodes (each reports its own; node-c is reported above).
        for monitor in monitors:
            await eventually(polled(lambda m=monitor: len(m.liveness.nodes)), lambda n: n == 3)  # type: ignore[misc]
        await eventually(polled(lambda: [m.leading for m in monitors]), lambda leading: any(leading))
        assert sorted(m.leading for m in monitors) == [False, True]
        assert await counted(monitors) == Counter({"node-a": 1, "node-b": 1, "node-c": 1})

        # A node silent past node_lost_after is declared lost by the leader alone.
        leader, standby = both if both[0].monitor.leading else both[::-1]
        clock.advance(61)
        assert await standby.monitor.check_liveness() == []
        assert sorted(e.name for e in await leader.monitor.check_liveness()) == ["node-a", "node-b", "node-c"]

        # The leader dies without a clean stop: its lease expires and the standby takes it over.
        leader.task.cancel()
        await leader.bus.nc.close()
        await asyncio.gather(leader.task, return_exceptions=True)
        await eventually(polled(lambda: standby.monitor.leading), bool, within=30)
        assert await counted([standby.monitor]) == Counter({"node-a": 1, "node-b": 1, "node-c": 1})
