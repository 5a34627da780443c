"""What a webhook's receivers get: every subscription of one owner its own events, a redirect
never followed, and the platform's own address refused in its trailing-dot forms too."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web
from aiohttp.test_utils import TestServer

from libs.backbone.connecting import Bus
from libs.backbone.natsserver import EmbeddedNats
from tests.events.lifecycles import LIFECYCLE, life
from tests.events.support import bearer, gateway, publish_all, settings
from tests.events.test_webhooks import Receiver, receiving, subscribe
from tests.support.waiting import eventually, polled

SECRET = "s3cret-for-signing"
REDIRECTS = (301, 302, 307, 308)


def delivered(receiver: Receiver) -> set[tuple[str, str]]:
    """(job, type) of every event the receiver took, each once (deliveries are at least once)."""
    return {(event["job_id"], event["type"]) for event in (json.loads(body) for _, body in receiver.received)}


async def test_every_webhook_of_one_owner_receives_every_event_its_filter_matches(
    topology: Bus, gateway_url: str
) -> None:
    everything, one_job, endings = Receiver(), Receiver(), Receiver()
    async with (
        receiving(everything) as everything_url,
        receiving(one_job) as one_job_url,
        receiving(endings) as endings_url,
        httpx.AsyncClient(timeout=10) as client,
    ):
        # Three subscriptions of alice whose filters overlap: j1's job.completed matches all three.
        await subscribe(client, gateway_url, "alice-token", {"url": everything_url, "secret": SECRET})
        one: dict[str, object] = {"url": one_job_url, "secret": SECRET, "job": "alice~train-j1"}
        await subscribe(client, gateway_url, "alice-token", one)
        await subscribe(
            client,
            gateway_url,
            "alice-token",
            {"url": endings_url, "secret": SECRET, "username": "alice", "types": "job.completed"},
        )
        await publish_all(topology.js, life("b1", "bob", "not-alices"))
        for job in ("j1", "j2"):
            await publish_all(topology.js, life(job, "alice", f"train-{job}"))
        expected = {
            "everything": {(job, kind) for job in ("j1", "j2") for kind in LIFECYCLE},
            "one job": {("j1", kind) for kind in LIFECYCLE},
            "endings": {("j1", "job.completed"), ("j2", "job.completed")},
        }
        receivers = {"everything": everything, "one job": one_job, "endings": endings}
        for name, receiver in receivers.items():
            await eventually(polled(functools.partial(delivered, receiver)), expected[name].issubset)
    assert {name: delivered(receiver) for name, receiver in receivers.items()} == expected


@asynccontextmanager
async def redirecting(target: str) -> AsyncIterator[str]:
    """A receiver answering /r<code> with that redirect to ``target``; yields its base URL."""

    async def redirect(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=int(request.match_info["code"]), headers={"Location": target})

    app = web.Application()
    app.router.add_post("/r{code}", redirect)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


@asynccontextmanager
async def catching_all(received: list[str]) -> AsyncIterator[str]:
    """A redirect's target: records every request, whatever its method and path."""

    async def anything(request: web.Request) -> web.Response:
        received.append(f"{request.method} {request.path}")
        return web.Response(status=200)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", anything)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("/elsewhere"))
    finally:
        await server.close()


async def test_a_receivers_redirect_is_never_followed_and_the_attempt_fails_with_its_status(
    topology: Bus, gateway_url: str
) -> None:
    at_target: list[str] = []
    async with (
        catching_all(at_target) as target,
        redirecting(target) as base,
        httpx.AsyncClient(timeout=10) as client,
    ):
        hooks = {
            code: await subscribe(
                client,
                gateway_url,
                "alice-token",
                {"url": f"{base}/r{code}", "secret": SECRET, "types": "job.submitted"},
            )
            for code in REDIRECTS
        }
        await publish_all(topology.js, life("j1", "alice", "train"))

        async def shown(hook_id: object) -> dict[str, Any]:
            url = f"{gateway_url}/api/v2/webhooks/{hook_id}"
            found: dict[str, Any] = (await client.get(url, headers=bearer("alice-token"))).json()
            return found

        # A 3xx is a client error: retried a few times, then the subscription is failing (or,
        # had the redirect been followed, its target received the event).
        for hook in hooks.values():
            await eventually(
                functools.partial(shown, hook["id"]), lambda h: h["state"] == "failing" or bool(at_target)
            )
        assert at_target == [], "a redirect was followed"
        attempts = {
            code: (
                await client.get(
                    f"{gateway_url}/api/v2/webhooks/{hook['id']}/deliveries", headers=bearer("alice-token")
                )
            ).json()
            for code, hook in hooks.items()
        }
    for code, made in attempts.items():
        assert made, code
        assert {(a["event"], a["status"], a["ok"], a["error"]) for a in made} == {
            ("job.submitted", code, False, f"HTTP {code}")
        }


async def test_a_url_naming_the_platform_with_a_trailing_dot_is_refused_like_every_other_form(
    topology: Bus, nats_server: EmbeddedNats, rest_url: str, tmp_path: Path
) -> None:
    # The REST stand-in plays the API: its port is one of the platform's own.
    api_port = int(rest_url.rsplit(":", 1)[1])
    config = settings(nats_server.url, rest_url, tmp_path, webhook_forbidden_ports=str(api_port))
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
                f"http://localhost.:{api_port}/api/v2/users/me",
                f"http://LOCALHOST.:{api_port}/",
                f"http://api.localhost.:{api_port}/",
                f"http://127.0.0.1.:{api_port}/",
                f"http://0x7f.1.:{api_port}/",
                f"http://[::ffff:127.0.0.1]:{api_port}/",
            )
        }
        for target, answer in answers.items():
            assert answer.status_code == 400, (target, answer.text)
            assert "rule PAI_WEBHOOK_FORBIDDEN_PORTS" in answer.json()["message"], target
        # Another loopback port named the same way is no platform port: it receives.
        receiver_port = int(hook_url.rsplit(":", 1)[1].split("/", 1)[0])
        hook = await subscribe(
            client, url, "alice-token", {"url": f"http://localhost.:{receiver_port}/hook", "secret": SECRET}
        )
        await publish_all(topology.js, life("j1", "alice", "train"))
        await eventually(polled(lambda: len(receiver.received)), lambda n: n >= len(LIFECYCLE))
    assert hook["state"] == "active"
