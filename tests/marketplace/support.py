"""The marketplace under test: a stand-in for the public REST API, the service, a client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web
from aiohttp.test_utils import TestServer

from services.marketplace.app import build_app
from services.marketplace.settings import MarketplaceSettings

# token -> (user, admin, groups), as REST's GET /api/v2/users/me answers.
USERS: dict[str, tuple[str, bool, tuple[str, ...]]] = {
    "alice": ("alice", False, ("default", "vision")),
    "bob": ("bob", False, ("default",)),
    "carol": ("carol", False, ("vision",)),
    "admin": ("admin", True, ("default", "admingroup")),
}
GROUPS = ("default", "vision", "admingroup", "speech")

HELLO = """\
protocolVersion: 2
name: hello
type: job
prerequisites:
  - name: image
    type: dockerimage
    uri: python:3.11-slim
taskRoles:
  main:
    instances: 1
    dockerImage: image
    resourcePerInstance: {cpu: 1, memoryMB: 256, gpu: 0}
    commands:
      - echo hello
"""


@asynccontextmanager
async def rest_stand_in() -> AsyncIterator[str]:
    """GET /api/v2/users/me, /api/v2/groups and /api/v2/info for the tokens in USERS."""

    def caller(request: web.Request) -> tuple[str, bool, tuple[str, ...]] | None:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        return USERS.get(token)

    async def me(request: web.Request) -> web.Response:
        found = caller(request)
        if found is None:
            return web.json_response({"code": "UnauthorizedUserError", "message": "no"}, status=401)
        user, admin, groups = found
        return web.json_response({"username": user, "admin": admin, "grouplist": list(groups)})

    async def groups(request: web.Request) -> web.Response:
        if caller(request) is None:
            return web.json_response({"code": "UnauthorizedUserError", "message": "no"}, status=401)
        return web.json_response([{"groupname": name} for name in GROUPS])

    async def info(_request: web.Request) -> web.Response:
        return web.json_response({"name": "pai", "limits": {"tasksPerJob": 100, "nameLength": 255}})

    app = web.Application()
    app.router.add_get("/api/v2/users/me", me)
    app.router.add_get("/api/v2/groups", groups)
    app.router.add_get("/api/v2/info", info)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


def settings(
    nats_url: str, rest_url: str, database_url: str, tmp: Path, **overrides: Any
) -> MarketplaceSettings:
    values: dict[str, Any] = {
        "nats_url": nats_url,
        "rest_url": rest_url,
        "database_url": database_url,
        "data_dir": tmp,
        "identity_cache_seconds": 0.0,
        # The starters are test_starters.py's; the other tests start from an empty marketplace.
        "marketplace_seed": False,
        **overrides,
    }
    return MarketplaceSettings(**values)


@asynccontextmanager
async def marketplace(config: MarketplaceSettings) -> AsyncIterator[str]:
    """The service in this process on a free port; yields its base URL."""
    server = TestServer(build_app(config), host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


@dataclass
class Market:
    """A client of the marketplace's API as one user or another."""

    client: httpx.AsyncClient

    async def call(self, method: str, path: str, user: str | None, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {user}"} if user else {}
        return await self.client.request(method, "/marketplace/api" + path, headers=headers, **kwargs)

    async def create(self, user: str, **fields: Any) -> dict[str, Any]:
        body = {"name": "an item", "type": "template", "protocol": HELLO, "isPrivate": True, **fields}
        response = await self.call("POST", "/items", user, json=body)
        assert response.status_code == 201, response.text
        return dict(response.json())

    async def ids(self, user: str, **params: Any) -> list[str]:
        response = await self.call("GET", "/items", user, params=params)
        assert response.status_code == 200, response.text
        return [item["id"] for item in response.json()]
