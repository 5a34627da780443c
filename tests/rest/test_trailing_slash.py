"""Every route accepts one trailing slash, under both prefixes, as OpenPAI's router does."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

from tests.rest.test_authz_matrix import served_routes

Client = TestClient[Any, Any]


async def test_a_trailing_slash_reaches_the_same_route_with_its_body_and_caller(
    api: Client, admin_headers: dict[str, str]
) -> None:
    created = await api.post(
        "/rest-server/api/v2/users/",
        json={"username": "bob", "password": "bob-password"},
        headers=admin_headers,
    )
    assert created.status == 201, await created.text()
    listed = await api.get("/api/v2/users/", headers=admin_headers)
    assert listed.status == 200
    assert [user["username"] for user in await listed.json()] == ["admin", "bob"]
    joined = await api.put(
        "/api/v2/users/bob/group/", json={"groupname": "admingroup"}, headers=admin_headers
    )
    assert joined.status == 201, await joined.text()
    bob = await (await api.get("/rest-server/api/v2/users/bob/", headers=admin_headers)).json()
    assert bob["admin"] is True
    # Path parameters still bind, and the query string reaches the handler.
    jobs = await api.get("/api/v2/jobs/?limit=0", headers=admin_headers)
    assert jobs.status == 400
    assert "limit" in (await jobs.json())["message"]
    # Without credentials the route still refuses: the slash changes nothing but the path.
    anonymous = await api.get("/api/v2/users/")
    assert anonymous.status == 401


async def test_what_no_route_serves_stays_an_error_in_openpai_shape(
    api: Client, admin_headers: dict[str, str]
) -> None:
    for path in ("/api/v2/nothing/", "/api/v2/users//", "/api/v2/"):
        response = await api.get(path, headers=admin_headers)
        assert response.status == 404, path
        assert (await response.json())["code"] == "NoApiError"
    wrong_method = await api.patch("/api/v2/users/", headers=admin_headers)
    assert wrong_method.status == 405
    assert (await wrong_method.json())["code"] == "NoApiError"


async def test_each_route_is_registered_and_listed_once(api: Client) -> None:
    served = served_routes(api)
    assert not [path for _, path in served if path.endswith("/")]
    doc = await (await api.get("/api/v2/openapi.json/")).json()
    assert {(method.upper(), path) for path, item in doc["paths"].items() for method in item} == served
