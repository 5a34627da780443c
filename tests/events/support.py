"""The events gateway under test: a stand-in for REST's /users/me, the gateway, an SSE reader."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web
from aiohttp.test_utils import TestServer
from httpx_sse import ServerSentEvent, aconnect_sse

from libs.protocol.events import EventBase
from pai.embedded.platform import free_port
from services.events.app import build_app
from services.events.settings import EventsSettings

REPO = Path(__file__).resolve().parents[2]
# token -> (user, admin), as REST's GET /api/v2/users/me would answer.
USERS = {"alice-token": ("alice", False), "bob-token": ("bob", False), "admin-token": ("admin", True)}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@asynccontextmanager
async def identity_server() -> AsyncIterator[str]:
    """A REST stand-in answering GET /api/v2/users/me for the tokens in USERS."""

    async def me(request: web.Request) -> web.Response:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if token not in USERS:
            return web.json_response({"code": "UnauthorizedUserError", "message": "no"}, status=401)
        user, admin = USERS[token]
        return web.json_response({"username": user, "admin": admin, "virtualCluster": ["default"]})

    app = web.Application()
    app.router.add_get("/api/v2/users/me", me)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        # A webhook's delivery loop still waiting on its receiver must not hold the test's end.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.close(), 15)


def settings(nats_url: str, rest_url: str, tmp: Path, **overrides: Any) -> EventsSettings:
    values: dict[str, Any] = {
        "nats_url": nats_url,
        "rest_url": rest_url,
        "data_dir": tmp,
        "identity_cache_seconds": 0.0,
        "webhook_backoff_first_seconds": 0.05,
        "webhook_backoff_max_seconds": 0.2,
        **overrides,
    }
    return EventsSettings(**values)


@asynccontextmanager
async def gateway(config: EventsSettings) -> AsyncIterator[str]:
    """The gateway in this process on a free port; yields its base URL."""
    server = TestServer(build_app(config), host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        # A webhook's delivery loop still waiting on its receiver must not hold the test's end.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.close(), 15)


@dataclass
class GatewayProcess:
    """The gateway as its own process (``python -m services.events``), for kill tests."""

    env: dict[str, str]
    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.process = subprocess.Popen(  # noqa: ASYNC220 - a child left running on purpose
            [sys.executable, "-m", "services.events"], env=self.env, cwd=REPO, stderr=subprocess.DEVNULL
        )
        async with httpx.AsyncClient(timeout=2.0) as client:
            for _ in range(600):
                try:
                    await client.get(f"{self.url}/api/v2/events")
                    return
                except httpx.TransportError:
                    await asyncio.sleep(0.05)  # polling a port: there is no event to await
        raise AssertionError("the gateway did not open its port")

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()


def process_env(nats_url: str, rest_url: str, port: int) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PAI_NATS_URL": nats_url,
        "PAI_REST_URL": rest_url,
        "PAI_EVENTS_PORT": str(port),
        "PAI_LOG_FORMAT": "json",
        "PAI_IDENTITY_CACHE_SECONDS": "0",
    }


def new_port() -> int:
    return free_port()


async def read_events(
    client: httpx.AsyncClient,
    url: str,
    token: str,
    count: int,
    *,
    params: dict[str, str] | None = None,
    last_event_id: str | None = None,
    within: float = 20.0,
    opened: asyncio.Event | None = None,
) -> list[ServerSentEvent]:
    """The first ``count`` messages of a stream (fails after ``within`` seconds); ``opened`` is set
    once the gateway answered, by which time it has registered the subscriber."""
    headers = bearer(token)
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    got: list[ServerSentEvent] = []
    async with asyncio.timeout(within):
        async with aconnect_sse(
            client, "GET", f"{url}/api/v2/events", params=params, headers=headers
        ) as source:
            assert source.response.status_code == 200, await source.response.aread()
            if opened is not None:
                opened.set()
            async for message in source.aiter_sse():
                if not message.data:
                    continue  # a keep-alive comment, which httpx-sse hands on as an empty message
                got.append(message)
                if len(got) >= count:
                    break
    return got


def types_of(messages: list[ServerSentEvent]) -> list[str]:
    return [m.event for m in messages]


async def publish_all(js: Any, events: list[EventBase]) -> None:
    from libs.backbone.topology import publish_event

    for event in events:
        await publish_event(js, event)
