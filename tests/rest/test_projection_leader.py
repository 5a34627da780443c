"""REST replicas: one projects the job stream at a time, the other takes over when it stops."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from libs.backbone.connecting import Bus
from libs.backbone.topology import ensure_topology
from services.rest.adapters.leading import project_while_leading


async def test_one_replica_projects_and_the_other_takes_over_when_it_stops(bus: Bus) -> None:
    await ensure_topology(bus.js)
    projecting: list[str] = []
    started = {name: asyncio.Event() for name in ("rest-0", "rest-1")}

    def projector(name: str) -> Callable[[asyncio.Event], Awaitable[None]]:
        async def project(turn: asyncio.Event) -> None:
            projecting.append(name)
            assert len(projecting) == 1, f"two replicas project at once: {projecting}"
            started[name].set()
            await turn.wait()
            projecting.remove(name)

        return project

    stops = {name: asyncio.Event() for name in started}
    replicas = {
        name: asyncio.create_task(project_while_leading(bus, name, projector(name), stops[name]))
        for name in started
    }
    done, _ = await asyncio.wait(
        [asyncio.create_task(event.wait()) for event in started.values()],
        return_when=asyncio.FIRST_COMPLETED,
        timeout=20,
    )
    assert len(done) == 1
    first = next(name for name, event in started.items() if event.is_set())
    second = next(name for name in started if name != first)
    await asyncio.sleep(1.0)  # a standby that looks every half second would have started by now
    assert not started[second].is_set()

    stops[first].set()  # a clean stop releases the lease: the standby takes over at its next look
    await asyncio.wait_for(replicas[first], 10)
    await asyncio.wait_for(started[second].wait(), 10)
    assert projecting == [second]
    stops[second].set()
    await asyncio.wait_for(replicas[second], 10)
