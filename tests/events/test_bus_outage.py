"""A bus restart under a live stream: the gateway follows again and the stream goes on."""

from __future__ import annotations

import asyncio
import json

import httpx
import nats.errors
import pytest

from libs.backbone.connecting import Bus
from libs.backbone.natsserver import EmbeddedNats
from tests.events.lifecycles import LIFECYCLE, life
from tests.events.support import publish_all, read_events

pytestmark = pytest.mark.timeout(90)


async def test_a_stream_open_across_a_nats_restart_receives_what_follows(
    topology: Bus, nats_server: EmbeddedNats, gateway_url: str
) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        reading = asyncio.create_task(
            read_events(
                client, gateway_url, "alice-token", 10, params={"username": "alice", "since": "0"}, within=60
            )
        )
        await publish_all(topology.js, life("j1", "alice", "before"))
        await nats_server.restart()
        after = life("j2", "alice", "after")  # the same ids at every try: the stream drops repeats
        for _ in range(50):
            await topology.connected.wait()  # the test's own client is back (or not yet seen gone)
            try:
                await publish_all(topology.js, after)
                break
            except (nats.errors.Error, TimeoutError):
                await asyncio.sleep(0.1)  # it was still reconnecting
        messages = await reading
    got = [(json.loads(m.data)["job_id"], m.event) for m in messages]
    assert got == [(job, kind) for job in ("j1", "j2") for kind in LIFECYCLE]
