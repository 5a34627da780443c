"""Each webhook is its own delivery queue: a failing receiver holds only its own subscription.

Bob's receivers refuse connections, answer 500 or never answer, while a 150-task job of his
runs; alice's healthy receiver still gets her ``job.completed`` within seconds. A receiver that
rejects deliveries with a 4xx is retried a few times, then its subscription is failing, which
its owner sees in the subscription, its deliveries and an alert.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from aiohttp import web
from aiohttp.test_utils import TestServer

from libs.backbone.connecting import Bus
from libs.backbone.natsserver import EmbeddedNats
from libs.protocol.events import (
    EventBase,
    JobCompleted,
    JobScheduled,
    JobState,
    TaskCompleted,
    TaskPlacement,
    TaskStarted,
)
from tests.events.lifecycles import life, submitted
from tests.events.support import bearer, gateway, publish_all, settings

SECRET = "s3cret"
TASKS = 150


@asynccontextmanager
async def serving(handler: Callable[[web.Request], Awaitable[web.Response]]) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/hook", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("/hook"))
    finally:
        await server.close()


def closed_port_url() -> str:
    """A loopback port nobody listens on: connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook"


def big_job(job_id: str, user: str, name: str) -> list[EventBase]:
    placements = tuple(
        TaskPlacement(role="worker", index=i, node="n1", node_address="10.0.0.1") for i in range(TASKS)
    )
    events: list[EventBase] = [
        submitted(job_id, user, name),
        JobScheduled(job_id=job_id, attempt=0, placements=placements),
    ]
    events += [TaskStarted(job_id=job_id, attempt=0, role="worker", index=i, node="n1") for i in range(TASKS)]
    events += [
        TaskCompleted(job_id=job_id, attempt=0, role="worker", index=i, exit_code=0) for i in range(TASKS)
    ]
    events.append(JobCompleted(job_id=job_id, attempt=0, state=JobState.SUCCEEDED, exit_code=0))
    return events


async def subscribe(
    client: httpx.AsyncClient, url: str, token: str, body: dict[str, object]
) -> dict[str, object]:
    response = await client.post(f"{url}/api/v2/webhooks", json=body, headers=bearer(token))
    assert response.status_code == 201, response.text
    answer: dict[str, object] = response.json()
    return answer


async def test_bobs_failing_receivers_and_150_task_job_do_not_delay_alices_webhook(
    topology: Bus, nats_server: EmbeddedNats, rest_url: str, tmp_path: Path
) -> None:
    # The delivery settings of a real deployment: 1 s first backoff, 10 s timeout.
    config = settings(
        nats_server.url,
        rest_url,
        tmp_path,
        webhook_backoff_first_seconds=1.0,
        webhook_backoff_max_seconds=3600.0,
        webhook_timeout_seconds=10.0,
    )
    never = asyncio.Event()
    arrived: asyncio.Queue[tuple[float, dict[str, object]]] = asyncio.Queue()

    async def hangs(request: web.Request) -> web.Response:
        await never.wait()  # never answers: the gateway times out
        return web.Response()

    async def fails(request: web.Request) -> web.Response:
        return web.Response(status=500)

    async def alices(request: web.Request) -> web.Response:
        await arrived.put((time.monotonic(), json.loads(await request.read())))
        return web.Response()

    async with (
        gateway(config) as url,
        serving(hangs) as hanging_url,
        serving(fails) as failing_url,
        serving(alices) as alice_url,
        httpx.AsyncClient(timeout=10) as client,
    ):
        for bad in (closed_port_url(), failing_url, hanging_url, closed_port_url(), failing_url, hanging_url):
            await subscribe(client, url, "bob-token", {"url": bad, "secret": SECRET})
        await subscribe(
            client, url, "alice-token", {"url": alice_url, "secret": SECRET, "types": "job.completed"}
        )
        await publish_all(topology.js, big_job("bobs-job", "bob", "sweep"))
        alices_life = life("alices-job", "alice", "train")
        await publish_all(topology.js, alices_life[:-1])
        completed_at = time.monotonic()
        await publish_all(topology.js, alices_life[-1:])
        at, event = await asyncio.wait_for(arrived.get(), 30)
        never.set()
    assert event["type"] == "job.completed"
    assert event["job_id"] == "alices-job"
    assert at - completed_at < 5.0, (
        f"alice's job.completed arrived {at - completed_at:.1f}s after her job ended"
    )


async def test_a_receiver_answering_4xx_is_retried_then_its_webhook_is_failing_and_its_owner_told(
    topology: Bus, nats_server: EmbeddedNats, rest_url: str, tmp_path: Path
) -> None:
    config = settings(nats_server.url, rest_url, tmp_path, webhook_client_error_attempts=3)
    answered: list[int] = []
    alerts: asyncio.Queue[bytes] = asyncio.Queue()

    async def rejects(request: web.Request) -> web.Response:
        answered.append(401)
        return web.Response(status=401)

    async def on_alert(msg: object) -> None:
        await alerts.put(msg.data)  # type: ignore[attr-defined]

    await topology.nc.subscribe("pai.alert.*.alert.fired", cb=on_alert)
    async with gateway(config) as url, serving(rejects) as hook_url, httpx.AsyncClient(timeout=10) as client:
        hook = await subscribe(
            client, url, "alice-token", {"url": hook_url, "secret": SECRET, "types": "job.submitted"}
        )
        await publish_all(topology.js, life("j1", "alice", "train"))
        fired = json.loads(await asyncio.wait_for(alerts.get(), 20))
        shown = (
            await client.get(f"{url}/api/v2/webhooks/{hook['id']}", headers=bearer("alice-token"))
        ).json()
        deliveries = (
            await client.get(f"{url}/api/v2/webhooks/{hook['id']}/deliveries", headers=bearer("alice-token"))
        ).json()
    assert answered == [401, 401, 401]
    assert fired["name"] == "WebhookFailing"
    assert fired["labels"] == {"webhook": hook["id"], "username": "alice"}
    assert shown["state"] == "failing"
    assert "HTTP 401" in shown["lastError"]
    assert [d["status"] for d in deliveries] == [401, 401, 401]
