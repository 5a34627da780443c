"""Use counts come from job.submitted: +1 per job submitted from an item, never twice for a job."""

from __future__ import annotations

from pathlib import Path

import httpx
from nats.js.errors import NotFoundError

from libs.backbone.connecting import Bus
from libs.backbone.natsserver import EmbeddedNats
from libs.backbone.topology import publish_event
from libs.protocol.events import JobSubmitted
from libs.protocol.subjects import JOBS_STREAM
from services.marketplace.adapters.counting import DURABLE
from tests.marketplace.support import Market, marketplace, settings
from tests.support.jobs import job_model
from tests.support.waiting import eventually


def submitted(job_id: str, item_id: str | None) -> JobSubmitted:
    extras = {"submitFrom": item_id} if item_id else {}
    return JobSubmitted(
        job_id=job_id,
        user="bob",
        name=job_id,
        virtual_cluster="default",
        config=job_model({"name": job_id, "extras": extras}),
    )


async def _all_handled(bus: Bus, count: int) -> None:
    async def probe() -> tuple[int, int]:
        try:
            info = await bus.js.consumer_info(JOBS_STREAM, DURABLE)
        except NotFoundError:
            return 0, -1  # the service has not made its consumer yet
        return info.ack_floor.stream_seq, info.num_pending + info.num_ack_pending

    await eventually(probe, lambda seen: seen[0] >= count and seen[1] == 0, within=20)


async def test_each_job_from_an_item_counts_once_even_when_its_event_comes_again(
    topology: Bus, nats_server: EmbeddedNats, rest_url: str, database_url: str, tmp_path: Path
) -> None:
    config = settings(nats_server.url, rest_url, database_url, tmp_path)
    async with marketplace(config) as url, httpx.AsyncClient(base_url=url) as client:
        market = Market(client)
        item = await market.create("alice", isPrivate=False, groupList=["default"])
        other = await market.create("alice", isPrivate=True)
        events = [
            submitted("job-a", item["id"]),
            submitted("job-a", item["id"]),  # the same job's event again (a new event id: not deduplicated)
            submitted("job-b", item["id"]),
            submitted("job-c", None),  # not from an item
            submitted("job-d", "no-such-item"),
            submitted("job-e", other["id"]),
        ]
        for event in events:
            await publish_event(topology.js, event)
        await _all_handled(topology, len(events))
        got = (await market.call("GET", f"/items/{item['id']}", "bob")).json()
        assert got["useNumber"] == 2
        assert (await market.call("GET", f"/items/{other['id']}", "alice")).json()["useNumber"] == 1

    # Every event delivered once more from the start: a consumer lost with its acks.
    await topology.js.delete_consumer(JOBS_STREAM, DURABLE)
    async with marketplace(config) as url, httpx.AsyncClient(base_url=url) as client:
        await _all_handled(topology, len(events))
        market = Market(client)
        assert (await market.call("GET", f"/items/{item['id']}", "bob")).json()["useNumber"] == 2
        assert (await market.call("GET", f"/items/{other['id']}", "alice")).json()["useNumber"] == 1
