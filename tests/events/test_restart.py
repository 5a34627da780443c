"""Killing the gateway mid-stream: the client reconnects with Last-Event-ID and misses nothing."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from libs.backbone.connecting import Bus
from libs.backbone.natsserver import EmbeddedNats
from tests.events.lifecycles import LIFECYCLE, life
from tests.events.support import GatewayProcess, new_port, process_env, publish_all, read_events

pytestmark = pytest.mark.timeout(90)


async def test_sigkill_mid_stream_then_resuming_by_last_event_id_loses_and_repeats_nothing(
    topology: Bus, nats_server: EmbeddedNats, rest_url: str
) -> None:
    jobs = [f"j{n}" for n in range(4)]
    process = GatewayProcess(process_env(nats_server.url, rest_url, new_port()), 0)
    process.port = int(process.env["PAI_EVENTS_PORT"])
    await process.start()
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            reading = asyncio.create_task(
                read_events(client, process.url, "alice-token", 7, params={"since": "0"})
            )
            for job in jobs[:2]:
                await publish_all(topology.js, life(job, "alice", f"train-{job}"))
            before = await reading
            process.kill()  # SIGKILL, while events keep coming
            for job in jobs[2:]:
                await publish_all(topology.js, life(job, "alice", f"train-{job}"))
            await process.start()
            after = await read_events(client, process.url, "alice-token", 20 - 7, last_event_id=before[-1].id)
    finally:
        process.kill()
    received = [(json.loads(m.data)["job_id"], m.event) for m in before + after]
    assert received == [(job, kind) for job in jobs for kind in LIFECYCLE]
    event_ids = [json.loads(m.data)["event_id"] for m in before + after]
    assert len(set(event_ids)) == len(event_ids)
