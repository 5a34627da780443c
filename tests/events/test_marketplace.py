"""Marketplace events on the gateway: ``types=marketplace.item.*`` follows PAI_MARKETPLACE, and
each event goes to whoever the events show may see its item (public and approved: everyone;
otherwise its author and admins)."""

from __future__ import annotations

import asyncio
import json

import httpx

from libs.backbone.connecting import Bus
from libs.protocol.events import MarketplaceItemApproved, MarketplaceItemCreated
from tests.events.support import bearer, publish_all, read_events, types_of

TYPES = "marketplace.item.created,marketplace.item.approved"


def created(item_id: str, author: str, visibility: str, status: str) -> MarketplaceItemCreated:
    return MarketplaceItemCreated(
        item_id=item_id,
        name=f"item-{item_id}",
        author=author,
        item_type="template",
        visibility=visibility,  # type: ignore[arg-type]
        status=status,  # type: ignore[arg-type]
    )


def approved(item_id: str, author: str) -> MarketplaceItemApproved:
    return MarketplaceItemApproved(
        item_id=item_id, name=f"item-{item_id}", author=author, item_type="template", by="admin"
    )


async def test_a_stream_of_marketplace_types_receives_the_items_its_caller_may_see(
    topology: Bus, gateway_url: str
) -> None:
    events: list[MarketplaceItemCreated | MarketplaceItemApproved] = [
        created("bobprivate", "bob", "private", "approved"),
        created("bobgroup", "bob", "group", "approved"),
        created("bobpublic", "bob", "public", "pending"),
        created("aliceown", "alice", "private", "approved"),
        approved("bobpublic", "bob"),
    ]
    async with httpx.AsyncClient(timeout=10) as client:
        opened = [asyncio.Event() for _ in range(3)]
        readers = [
            asyncio.create_task(
                read_events(client, gateway_url, token, count, params={"types": TYPES}, opened=ready)
            )
            for token, count, ready in zip(
                ("alice-token", "bob-token", "admin-token"), (2, 4, 5), opened, strict=True
            )
        ]
        await asyncio.gather(*(asyncio.wait_for(ready.wait(), 20) for ready in opened))
        await publish_all(topology.js, list(events))
        alice, bob, admin = await asyncio.gather(*readers)

    def items(messages: list) -> list[tuple[str, str]]:  # type: ignore[type-arg]
        return [(m.event, json.loads(m.data)["item_id"]) for m in messages]

    # alice: her own private item, and bob's public one once approved (not while pending, not
    # his private or group items: the events do not carry the groupList).
    assert items(alice) == [
        ("marketplace.item.created", "aliceown"),
        ("marketplace.item.approved", "bobpublic"),
    ]
    assert items(bob) == [
        ("marketplace.item.created", "bobprivate"),
        ("marketplace.item.created", "bobgroup"),
        ("marketplace.item.created", "bobpublic"),
        ("marketplace.item.approved", "bobpublic"),
    ]
    assert types_of(admin) == [e.type for e in events]
    # Following the marketplace stream only: the id is that stream's sequence.
    assert all(m.id.isdigit() for m in alice)


async def test_a_stream_of_marketplace_types_resumes_with_the_same_rule(
    topology: Bus, gateway_url: str
) -> None:
    await publish_all(
        topology.js,
        [created("x1", "bob", "private", "approved"), created("x2", "alice", "private", "approved")],
    )
    async with httpx.AsyncClient(timeout=10) as client:
        replayed = await read_events(
            client, gateway_url, "alice-token", 1, params={"types": "marketplace.item.created", "since": "0"}
        )
    assert [json.loads(m.data)["item_id"] for m in replayed] == ["x2"]


async def test_marketplace_types_with_a_job_filter_are_a_clear_400_and_webhooks_accept_them(
    gateway_url: str,
) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        mixed = await client.get(
            f"{gateway_url}/api/v2/events",
            params={"types": "marketplace.item.created", "username": "alice"},
            headers=bearer("alice-token"),
        )
        hook = await client.post(
            f"{gateway_url}/api/v2/webhooks",
            json={"url": "http://127.0.0.1:9/", "secret": "x", "types": ["marketplace.item.updated"]},
            headers=bearer("alice-token"),
        )
        # Its consumers go with it, not with the gateway's end.
        await client.delete(
            f"{gateway_url}/api/v2/webhooks/{hook.json()['id']}", headers=bearer("alice-token")
        )
    assert mixed.status_code == 400
    assert "marketplace items, not jobs" in mixed.json()["message"]
    assert hook.status_code == 201, hook.text
