"""GET /api/v2/events: order, resuming, rights, and the errors a caller can make."""

from __future__ import annotations

import asyncio
import json

import httpx
from httpx_sse import aconnect_sse

from libs.backbone.connecting import Bus
from libs.protocol.events import NodeReported, decode_event
from libs.protocol.subjects import JOBS_STREAM
from tests.events.lifecycles import LIFECYCLE, life, rest_of_life, submitted
from tests.events.support import bearer, publish_all, read_events, types_of


async def test_a_jobs_stream_shows_its_life_from_submission_to_completion_in_order(
    topology: Bus, gateway_url: str
) -> None:
    await publish_all(topology.js, [submitted("j1", "alice", "train")])
    async with httpx.AsyncClient(timeout=10) as client:
        reading = asyncio.create_task(
            read_events(client, gateway_url, "alice-token", 5, params={"job": "alice~train", "since": "0"})
        )
        await publish_all(topology.js, rest_of_life("j1"))
        messages = await reading
    assert types_of(messages) == LIFECYCLE
    ids = [int(m.id) for m in messages]
    assert ids == sorted(ids)
    assert len(set(ids)) == 5
    for message in messages:
        event = decode_event(message.data)  # exactly the catalog's model
        assert event.type == message.event
        assert json.loads(message.data)["job_id"] == "j1"
    assert json.loads(messages[0].data)["config"]["secrets"] == {"token": "******"}


async def test_resuming_after_an_id_continues_with_the_next_event_only(
    topology: Bus, gateway_url: str
) -> None:
    await publish_all(topology.js, life("j1", "alice", "train"))
    async with httpx.AsyncClient(timeout=10) as client:
        first = await read_events(
            client, gateway_url, "alice-token", 2, params={"job": "alice~train", "since": "0"}
        )
        rest = await read_events(
            client, gateway_url, "alice-token", 3, params={"job": "alice~train"}, last_event_id=first[-1].id
        )
        by_since = await read_events(
            client, gateway_url, "alice-token", 1, params={"job": "alice~train", "since": first[0].id}
        )
    assert types_of(first + rest) == LIFECYCLE
    assert types_of(by_since) == ["job.scheduled"]


async def test_resuming_from_an_id_the_gateway_has_not_reached_sends_only_what_follows_it(
    topology: Bus, gateway_url: str
) -> None:
    # A client resumes from a cursor further than this gateway has read (another replica was
    # ahead): the events up to its cursor, which it has, arrive here live and are not sent again.
    last = int((await topology.js.stream_info(JOBS_STREAM)).state.last_seq)
    cursor = last + 2  # job.scheduled, the second event of the life below
    opened = asyncio.Event()
    async with httpx.AsyncClient(timeout=10) as client:
        reading = asyncio.create_task(
            read_events(
                client,
                gateway_url,
                "alice-token",
                3,
                params={"job": "alice~train", "since": str(cursor)},
                opened=opened,
            )
        )
        await asyncio.wait_for(opened.wait(), 20)  # subscribed: what is published now reaches it live
        await publish_all(topology.js, life("j1", "alice", "train"))
        messages = await reading
    assert [int(m.id) for m in messages] == [cursor + 1, cursor + 2, cursor + 3]
    assert types_of(messages) == LIFECYCLE[2:]


async def test_another_users_stream_never_carries_a_private_jobs_events(
    topology: Bus, gateway_url: str
) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        bobs = asyncio.create_task(read_events(client, gateway_url, "bob-token", 5, params={"since": "0"}))
        admins = asyncio.create_task(
            read_events(client, gateway_url, "admin-token", 11, params={"since": "0"})
        )
        await publish_all(topology.js, life("a1", "alice", "secret"))
        await publish_all(
            topology.js,
            [NodeReported(node_id="n1", name="n1", address="10.0.0.1", cpu=4, memory_mb=1024, gpus=0)],
        )
        await publish_all(topology.js, life("b1", "bob", "mine"))
        bob_messages = await bobs
        seen_by_admin = await admins
    assert types_of(bob_messages) == LIFECYCLE
    assert {json.loads(m.data)["job_id"] for m in bob_messages} == {"b1"}
    assert "node.reported" in types_of(seen_by_admin)
    assert {json.loads(m.data).get("job_id") for m in seen_by_admin} == {"a1", "b1", None}


async def test_anonymous_and_bad_tokens_get_401(gateway_url: str) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        anonymous = await client.get(f"{gateway_url}/api/v2/events")
        bad = await client.get(f"{gateway_url}/api/v2/events", headers=bearer("forged"))
    assert anonymous.status_code == 401
    assert anonymous.json()["code"] == "UnauthorizedUserError"
    assert bad.status_code == 401


async def test_unknown_types_and_malformed_filters_get_400_naming_them(gateway_url: str) -> None:
    cases = {
        "types=job.completed,job.exploded": "job.exploded",
        "job=alice": "job must be USER~NAME",
        "since=yesterday": "since",
    }
    async with httpx.AsyncClient(timeout=10) as client:
        for query, named in cases.items():
            response = await client.get(f"{gateway_url}/api/v2/events?{query}", headers=bearer("alice-token"))
            assert response.status_code == 400, query
            body = response.json()
            assert body["code"] == "InvalidParametersError"
            assert named in body["message"], body
        header = await client.get(
            f"{gateway_url}/api/v2/events", headers={**bearer("alice-token"), "Last-Event-ID": "x"}
        )
    assert header.status_code == 400
    assert "Last-Event-ID" in header.json()["message"]


async def test_an_idle_stream_gets_keep_alive_comments(gateway_url: str) -> None:
    async with (
        httpx.AsyncClient(timeout=10) as client,
        client.stream("GET", f"{gateway_url}/api/v2/events", headers=bearer("alice-token")) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        comments = 0
        async with asyncio.timeout(10):
            async for line in response.aiter_lines():
                comments += line.startswith(":")
                if comments >= 3:
                    break
    assert comments >= 3


async def test_filters_naming_another_users_jobs_answer_403_saying_why(gateway_url: str) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        for params in ({"job": "alice~secret"}, {"username": "alice"}):
            stream = await client.get(
                f"{gateway_url}/api/v2/events", params=params, headers=bearer("bob-token")
            )
            hook = await client.post(
                f"{gateway_url}/api/v2/webhooks",
                json={"url": "http://127.0.0.1:9/", "secret": "x", **params},
                headers=bearer("bob-token"),
            )
            for answer in (stream, hook):
                assert answer.status_code == 403, answer.text
                assert "alice's jobs" in answer.json()["message"]
        admins = await client.post(
            f"{gateway_url}/api/v2/webhooks",
            json={"url": "http://127.0.0.1:9/", "secret": "x", "job": "alice~secret"},
            headers=bearer("admin-token"),
        )
        # Its consumers go with it, not with the gateway's end.
        await client.delete(
            f"{gateway_url}/api/v2/webhooks/{admins.json()['id']}", headers=bearer("admin-token")
        )
    assert admins.status_code == 201


async def test_a_one_number_cursor_on_a_stream_of_several_streams_is_refused_naming_the_form(
    gateway_url: str,
) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        unfiltered = await client.get(
            f"{gateway_url}/api/v2/events", params={"since": "53"}, headers=bearer("admin-token")
        )
        resumed = await client.get(
            f"{gateway_url}/api/v2/events",
            headers={**bearer("admin-token"), "Last-Event-ID": "53"},
        )
    for answer in (unfiltered, resumed):
        assert answer.status_code == 400
        assert "3 numbers joined by '-'" in answer.json()["message"]
        assert "120-4-7" in answer.json()["message"]


async def test_the_events_and_webhooks_routes_accept_one_trailing_slash(gateway_url: str) -> None:
    async with (
        httpx.AsyncClient(timeout=10) as client,
        aconnect_sse(client, "GET", f"{gateway_url}/api/v2/events/", headers=bearer("alice-token")) as source,
    ):
        assert source.response.status_code == 200
        assert source.response.headers["content-type"].startswith("text/event-stream")
    async with httpx.AsyncClient(timeout=10) as client:
        created = await client.post(
            f"{gateway_url}/rest-server/api/v2/webhooks/",
            json={"url": "http://127.0.0.1:9/", "secret": "x"},
            headers=bearer("alice-token"),
        )
        listed = await client.get(f"{gateway_url}/api/v2/webhooks/", headers=bearer("alice-token"))
    assert created.status_code == 201, created.text
    assert [hook["id"] for hook in listed.json()] == [created.json()["id"]]


async def test_an_unknown_type_is_a_400_listing_every_catalog_type_marketplace_included(
    gateway_url: str,
) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        unknown = await client.get(
            f"{gateway_url}/api/v2/events", params={"types": "job.nope"}, headers=bearer("alice-token")
        )
    assert unknown.status_code == 400
    assert "marketplace.item.starred" in unknown.json()["message"]
    assert "node.reported" in unknown.json()["message"]
