"""Webhooks: signed, in order per job, retried while the receiver fails, then marked failing."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from aiohttp import web
from aiohttp.test_utils import TestServer

from libs.backbone.connecting import Bus
from libs.backbone.natsserver import EmbeddedNats
from tests.events.lifecycles import LIFECYCLE, life
from tests.events.support import bearer, gateway, publish_all, settings
from tests.support.waiting import eventually, polled

SECRET = "s3cret-for-signing"


@dataclass
class Receiver:
    """An HTTP receiver that fails its first ``failures`` deliveries with 500."""

    failures: int = 0
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    answered: list[int] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        status = 500 if len(self.answered) < self.failures else 200
        self.answered.append(status)
        if status == 200:
            self.received.append((dict(request.headers), body))
        return web.Response(status=status)


@asynccontextmanager
async def receiving(receiver: Receiver) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("/hook"))
    finally:
        await server.close()


async def subscribe(
    client: httpx.AsyncClient, url: str, token: str, body: dict[str, object]
) -> dict[str, object]:
    response = await client.post(f"{url}/api/v2/webhooks", json=body, headers=bearer(token))
    assert response.status_code == 201, response.text
    answer: dict[str, object] = response.json()
    return answer


async def test_a_receiver_failing_its_first_three_deliveries_still_gets_every_event_signed_in_order(
    topology: Bus, gateway_url: str
) -> None:
    receiver = Receiver(failures=3)
    async with receiving(receiver) as hook_url, httpx.AsyncClient(timeout=10) as client:
        hook = await subscribe(client, gateway_url, "alice-token", {"url": hook_url, "secret": SECRET})
        assert "secret" not in hook
        for job in ("j1", "j2"):
            await publish_all(topology.js, life(job, "alice", f"train-{job}"))
        await publish_all(topology.js, life("b1", "bob", "not-alices"))
        await eventually(
            polled(lambda: len({h["X-PAI-Delivery"] for h, _ in receiver.received})), lambda n: n >= 10
        )
        deliveries = (
            await client.get(
                f"{gateway_url}/api/v2/webhooks/{hook['id']}/deliveries", headers=bearer("alice-token")
            )
        ).json()
    assert receiver.answered[:3] == [500, 500, 500]
    per_job: dict[str, list[str]] = {}
    seen: set[str] = set()
    for headers, body in receiver.received:
        expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(headers["X-PAI-Signature-256"], expected)
        event = json.loads(body)
        assert headers["X-PAI-Event"] == event["type"]
        assert headers["X-PAI-Delivery"] == event["event_id"]
        if event["event_id"] not in seen:  # at least once: a repeat is recognised by its id
            seen.add(event["event_id"])
            per_job.setdefault(event["job_id"], []).append(event["type"])
    assert per_job == {"j1": LIFECYCLE, "j2": LIFECYCLE}
    failed = [d for d in deliveries if d["status"] == 500]
    assert len(failed) == 3
    assert all(d["error"] == "HTTP 500" and d["latencyMs"] >= 0 for d in failed)


async def test_a_receiver_failing_past_the_retry_window_marks_the_webhook_failing_with_an_alert(
    topology: Bus, nats_server: EmbeddedNats, rest_url: str, tmp_path: Path
) -> None:
    config = settings(nats_server.url, rest_url, tmp_path, webhook_retry_window_seconds=0.3)
    receiver = Receiver(failures=1_000_000)
    alerts: asyncio.Queue[bytes] = asyncio.Queue()

    async def on_alert(msg: object) -> None:
        await alerts.put(msg.data)  # type: ignore[attr-defined]

    await topology.nc.subscribe("pai.alert.*.alert.fired", cb=on_alert)
    async with (
        gateway(config) as url,
        receiving(receiver) as hook_url,
        httpx.AsyncClient(timeout=10) as client,
    ):
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
        receiver.failures = 0
        again = await client.post(
            f"{url}/api/v2/webhooks/{hook['id']}/deliveries/{deliveries[0]['delivery']}/redeliver",
            headers=bearer("alice-token"),
        )
        back = (await client.get(f"{url}/api/v2/webhooks/{hook['id']}", headers=bearer("alice-token"))).json()
    assert fired["name"] == "WebhookFailing"
    assert fired["labels"] == {"webhook": hook["id"], "username": "alice"}
    assert shown["state"] == "failing"
    assert shown["lastError"] == "HTTP 500"
    assert {d["event"] for d in deliveries} == {"job.submitted"}
    assert again.status_code == 202
    assert again.json()["ok"] is True
    assert back["state"] == "active"
    assert len(receiver.received) == 1


async def test_a_deeply_nested_body_is_a_400_naming_the_limit_not_a_500(gateway_url: str) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.post(
            f"{gateway_url}/api/v2/webhooks",
            content='{"url": "http://127.0.0.1:9/", "secret": "x", "types": '
            + "[" * 100_000
            + "]" * 100_000
            + "}",
            headers={**bearer("alice-token"), "Content-Type": "application/json"},
        )
    assert response.status_code == 400
    assert "nested more than" in response.json()["message"]


async def test_webhooks_refuse_bad_urls_and_are_private_to_their_owner(gateway_url: str) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        cases = {
            "ftp://example.com/x": "http:// or https://",
            "http://user:pw@example.com/x": "credentials",
        }
        for url, named in cases.items():
            response = await client.post(
                f"{gateway_url}/api/v2/webhooks",
                json={"url": url, "secret": "x"},
                headers=bearer("alice-token"),
            )
            assert response.status_code == 400
            assert named in response.json()["message"]
        no_secret = await client.post(
            f"{gateway_url}/api/v2/webhooks",
            json={"url": "http://127.0.0.1:9/"},
            headers=bearer("alice-token"),
        )
        assert "secret" in no_secret.json()["message"]
        bad_type = await client.post(
            f"{gateway_url}/api/v2/webhooks",
            json={"url": "http://127.0.0.1:9/", "secret": "x", "types": ["job.nope"]},
            headers=bearer("alice-token"),
        )
        assert "job.nope" in bad_type.json()["message"]
        anonymous = await client.get(f"{gateway_url}/api/v2/webhooks")
        assert anonymous.status_code == 401
        hook = await subscribe(
            client, gateway_url, "alice-token", {"url": "http://127.0.0.1:9/", "secret": "x"}
        )
        bobs_view = await client.get(
            f"{gateway_url}/api/v2/webhooks/{hook['id']}", headers=bearer("bob-token")
        )
        assert bobs_view.status_code == 404
        assert (await client.get(f"{gateway_url}/api/v2/webhooks", headers=bearer("bob-token"))).json() == []
        listed = (await client.get(f"{gateway_url}/api/v2/webhooks", headers=bearer("admin-token"))).json()
        assert [h["id"] for h in listed] == [hook["id"]]
        deleted = await client.delete(
            f"{gateway_url}/api/v2/webhooks/{hook['id']}", headers=bearer("alice-token")
        )
        assert deleted.status_code == 200
        assert (
            await client.get(f"{gateway_url}/api/v2/webhooks", headers=bearer("alice-token"))
        ).json() == []


async def test_an_admin_setting_forbids_ranges_in_every_address_form_and_an_allow_list_opens_one(
    topology: Bus, nats_server: EmbeddedNats, rest_url: str, tmp_path: Path
) -> None:
    config = settings(
        nats_server.url,
        rest_url,
        tmp_path,
        webhook_forbidden_networks="127.0.0.0/8,::1/128,169.254.0.0/16,10.0.0.0/8",
        webhook_allowed_networks="10.1.2.0/24",
    )
    refused = (
        "http://127.0.0.1:9/hook",
        "http://[::ffff:169.254.169.254]/latest",
        "http://[::ffff:127.0.0.1]:9/",
        "http://0.0.0.0:9/",
        "http://[::]:9/",
        "http://2130706433:9/",
        "http://0177.0.0.1:9/",
        "http://localhost:9/",
        "http://10.9.9.9/",
    )
    async with gateway(config) as url, httpx.AsyncClient(timeout=10) as client:
        answers = {
            target: await client.post(
                f"{url}/api/v2/webhooks", json={"url": target, "secret": "x"}, headers=bearer("alice-token")
            )
            for target in refused
        }
        allowed = await client.post(
            f"{url}/api/v2/webhooks",
            json={"url": "http://10.1.2.3/", "secret": "x"},
            headers=bearer("alice-token"),
        )
    for target, answer in answers.items():
        assert answer.status_code == 400, target
        assert "rule PAI_WEBHOOK_FORBIDDEN_NETWORKS" in answer.json()["message"], target
    assert allowed.status_code == 201, allowed.text


async def test_the_platforms_own_ports_are_refused_in_every_form_and_other_loopback_receivers_work(
    topology: Bus, nats_server: EmbeddedNats, rest_url: str, tmp_path: Path
) -> None:
    # The REST stand-in plays the API: its port is one of the platform's own.
    api_port = int(rest_url.rsplit(":", 1)[1])
    nats_port = int(nats_server.url.rsplit(":", 1)[1])
    config = settings(nats_server.url, rest_url, tmp_path, webhook_forbidden_ports=f"{api_port},{nats_port}")
    receiver = Receiver()
    async with (
        gateway(config) as url,
        receiving(receiver) as hook_url,
        httpx.AsyncClient(timeout=10) as client,
    ):
        answers = {
            target: await client.post(
                f"{url}/api/v2/webhooks", json={"url": target, "secret": "x"}, headers=bearer("alice-token")
            )
            for target in (
                f"http://[::ffff:127.0.0.1]:{api_port}/api/v2/users/me",
                f"http://0.0.0.0:{api_port}/",
                f"http://127.0.0.1:{api_port}/",
                f"http://localhost:{api_port}/",
                f"http://2130706433:{api_port}/",
                f"http://[::]:{nats_port}/",
            )
        }
        hook = await subscribe(client, url, "alice-token", {"url": hook_url, "secret": SECRET})
        await publish_all(topology.js, life("j1", "alice", "train"))
        await eventually(polled(lambda: len(receiver.received)), lambda n: n >= 5)
    for target, answer in answers.items():
        assert answer.status_code == 400, target
        assert "rule PAI_WEBHOOK_FORBIDDEN_PORTS" in answer.json()["message"], target
    assert hook["state"] == "active"
