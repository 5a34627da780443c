"""Other services' paths at the API's address: the marketplace passed through (over TCP or its
Unix socket, as `pai up` has it), 503 when absent."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from libs.web.addresses import private_directory, unix_url
from libs.web.serving import site
from services.rest.app import build_app
from services.rest.settings import RestSettings


@pytest.fixture(params=["tcp", "unix"])
async def upstream(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A stand-in marketplace recording what reaches it, on a port or on a socket (its URL then
    unix:///...)."""
    seen: list[dict[str, Any]] = []

    async def anything(request: web.Request) -> web.Response:
        seen.append(
            {
                "method": request.method,
                "path_qs": request.rel_url.path_qs,
                "authorization": request.headers.get("Authorization"),
                "body": await request.text(),
            }
        )
        return web.json_response([{"id": "x"}], status=201, headers={"X-Total-Count": "7"})

    app = web.Application()
    app.router.add_route("*", "/marketplace/api/{tail:.*}", anything)
    if request.param == "unix":
        with tempfile.TemporaryDirectory(prefix="pai-sock-") as base:
            path = private_directory(Path(base) / "sockets") / "marketplace.sock"
            runner = web.AppRunner(app)
            await runner.setup()
            await site(runner, "", 0, path).start()
            try:
                assert path.stat().st_mode & 0o777 == 0o600
                yield unix_url(path), seen
            finally:
                await runner.cleanup()
        return
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/"), seen
    finally:
        await server.close()


async def _client(settings: RestSettings) -> TestClient[Any, Any]:
    client: TestClient[Any, Any] = TestClient(TestServer(build_app(settings)))
    await client.start_server()
    return client


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_rest_passes_the_marketplace_path_through_with_the_token_and_body(
    rest_settings: RestSettings, upstream: tuple[str, list[dict[str, Any]]]
) -> None:
    url, seen = upstream
    client = await _client(rest_settings.model_copy(update={"marketplace_url": url}))
    try:
        response = await client.post(
            "/marketplace/api/items?x=1", json={"name": "n"}, headers={"Authorization": "Bearer t"}
        )
        assert response.status == 201
        assert response.headers["X-Total-Count"] == "7"
        assert await response.json() == [{"id": "x"}]
    finally:
        await client.close()
    assert seen == [
        {
            "method": "POST",
            "path_qs": "/marketplace/api/items?x=1",
            "authorization": "Bearer t",
            "body": '{"name": "n"}',
        }
    ]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_without_a_marketplace_its_path_is_a_503_saying_so(rest_settings: RestSettings) -> None:
    client = await _client(rest_settings)
    try:
        response = await client.get("/marketplace/api/items")
        assert response.status == 503
        body = await response.json()
        assert body["code"] == "ServiceUnavailableError"
        assert "marketplace is not running" in body["message"]
        for gone in ("http://127.0.0.1:9", "unix:///nonexistent/marketplace.sock"):
            down = rest_settings.model_copy(update={"marketplace_url": gone})
            await client.close()
            client = await _client(down)
            response = await client.get("/marketplace/api/items")
            assert response.status == 503
            assert "does not answer" in (await response.json())["message"]
    finally:
        await client.close()
