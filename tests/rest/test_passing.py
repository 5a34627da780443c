"""Other services' paths at the API's address: the marketplace passed through, 503 when absent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from services.rest.app import build_app
from services.rest.settings import RestSettings


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A stand-in marketplace recording what reaches it."""
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
        down = rest_settings.model_copy(update={"marketplace_url": "http://127.0.0.1:9"})
        await client.close()
        client = await _client(down)
        response = await client.get("/marketplace/api/items")
        assert response.status == 503
        assert "does not answer" in (await response.json())["message"]
    finally:
        await client.close()
