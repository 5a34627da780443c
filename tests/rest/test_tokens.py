"""Application tokens: they serve job operations only, are listed and revoked, and expire when
their owner chose (never unless asked)."""

from __future__ import annotations

import base64
from typing import Any

import jwt
import pytest
from aiohttp.test_utils import TestClient

from services.rest.adapters import accounts
from tests.rest.conftest import ADMIN_PASSWORD
from tests.rest.jobs import job_yaml
from tests.rest.test_users_groups import answer, create_user

Client = TestClient[Any, Any]
YAML = {"Content-Type": "text/yaml"}


async def application_token(api: Client, headers: dict[str, str]) -> str:
    response = await api.post("/api/v2/tokens/application", headers=headers)
    assert response.status == 200, await response.text()
    body = await response.json()
    assert body["application"] is True
    token: str = body["token"]
    return token


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def basic(user: str, token: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()}


async def test_an_application_token_never_expires_and_runs_jobs(
    api: Client, admin_headers: dict[str, str]
) -> None:
    token = await application_token(api, admin_headers)
    assert "exp" not in jwt.decode(token, options={"verify_signature": False})
    submitted = await api.post("/api/v2/jobs", data=job_yaml("scripted"), headers={**bearer(token), **YAML})
    assert submitted.status == 202, await submitted.text()
    assert (await api.get("/api/v2/jobs", headers=bearer(token))).status == 200
    tag = await api.put("/api/v2/jobs/admin~scripted/tag", json={"value": "nightly"}, headers=bearer(token))
    assert tag.status == 200


async def test_an_application_token_is_barred_from_account_operations(
    api: Client, admin_headers: dict[str, str]
) -> None:
    token = await application_token(api, admin_headers)
    for method, path, body in (
        ("GET", "/api/v2/tokens", None),
        ("POST", "/api/v2/tokens/application", None),
        ("DELETE", f"/api/v2/tokens/{token}", None),
        ("DELETE", "/api/v2/authn/basic/logout", None),
        ("POST", "/api/v2/users", {"username": "eve", "password": "eve-password"}),
        ("GET", "/api/v2/users", None),
        ("POST", "/api/v2/groups", {"groupname": "g"}),
        ("PUT", "/api/v2/users/me", {"data": {"email": "a@b.c"}, "patch": True}),
    ):
        response = await api.request(method, path, json=body, headers=bearer(token))
        assert await answer(response) == (403, "ForbiddenUserError"), (method, path)
    assert (await api.get("/api/v2/jobs", headers=bearer(token))).status == 200


async def test_a_basic_header_carries_user_and_application_token(
    api: Client, admin_headers: dict[str, str]
) -> None:
    bob = await create_user(api, admin_headers, "bob")
    token = await application_token(api, bob)
    assert (await api.get("/api/v2/users/me", headers=basic("bob", token))).status == 200
    assert (await (await api.get("/api/v2/users/me", headers=basic("bob", token))).json())[
        "username"
    ] == "bob"
    for headers in (basic("admin", token), {"Authorization": "Basic !!!"}, basic("bob", "forged")):
        assert await answer(await api.get("/api/v2/jobs", headers=headers)) == (401, "UnauthorizedUserError")


async def test_tokens_are_listed_and_revoked_by_their_owner(
    api: Client, admin_headers: dict[str, str]
) -> None:
    bob = await create_user(api, admin_headers, "bob")
    login_token = bob["Authorization"].split()[1]
    app_token = await application_token(api, bob)
    listed = await (await api.get("/api/v2/tokens", headers=bob)).json()
    assert sorted(listed["tokens"]) == sorted([login_token, app_token])
    admins = await (await api.get("/api/v2/tokens", headers=admin_headers)).json()
    assert app_token not in admins["tokens"]

    stolen = await api.delete(f"/api/v2/tokens/{app_token}", headers=admin_headers)
    assert await answer(stolen) == (403, "ForbiddenUserError")
    garbage = await api.delete("/api/v2/tokens/not-a-token", headers=bob)
    assert await answer(garbage) == (400, "InvalidParametersError")
    revoked = await api.delete(f"/api/v2/tokens/{app_token}", headers=bob)
    assert (revoked.status, await revoked.json()) == (200, {"message": "revoke successfully"})
    assert await answer(await api.get("/api/v2/jobs", headers=bearer(app_token))) == (
        401,
        "UnauthorizedUserError",
    )
    assert (await (await api.get("/api/v2/tokens", headers=bob)).json())["tokens"] == [login_token]


async def test_logout_revokes_only_the_token_used(api: Client, admin_headers: dict[str, str]) -> None:
    app_token = await application_token(api, admin_headers)
    assert (await api.delete("/api/v2/authn/basic/logout", headers=admin_headers)).status == 200
    assert (await api.get("/api/v2/jobs", headers=admin_headers)).status == 401
    assert (await api.get("/api/v2/jobs", headers=bearer(app_token))).status == 200


async def test_the_first_api_versions_token_route_logs_in_too(api: Client) -> None:
    form = {"username": "admin", "password": ADMIN_PASSWORD, "expiration": "3600"}
    response = await api.post("/rest-server/api/v1/token", data=form)
    body = await response.json()
    assert (response.status, body["user"], body["admin"]) == (200, "admin", True)
    claims = jwt.decode(body["token"], options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == 3600
    assert (await api.get("/api/v2/jobs", headers=bearer(body["token"]))).status == 200


async def test_a_named_token_with_an_expiry_is_listed_with_both_and_refused_once_it_expired(
    api: Client, admin_headers: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    created = await api.post(
        "/api/v2/tokens/application", json={"name": "nightly-ci", "expiration": 3600}, headers=admin_headers
    )
    assert created.status == 200, await created.text()
    body = await created.json()
    token = body["token"]
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == 3600
    assert (body["name"], body["expiresTime"]) == ("nightly-ci", claims["exp"] * 1000)
    forever = await application_token(api, admin_headers)  # OpenPAI's clients send no body

    listed = await (await api.get("/api/v2/tokens", headers=admin_headers)).json()
    details = {item["token"]: item for item in listed["details"]}
    assert details[token]["name"] == "nightly-ci"
    assert details[token]["expiresTime"] == claims["exp"] * 1000
    assert details[token]["application"] is True
    assert details[forever]["expiresTime"] is None
    assert listed["tokens"] == [item["token"] for item in listed["details"]]
    assert (await api.get("/api/v2/jobs", headers=bearer(token))).status == 200  # remembered now

    # An hour and a second later by the platform's clock: refused, remembered or not, and unlisted.
    later = accounts.now_ms() + 3_601_000
    monkeypatch.setattr(accounts, "now_ms", lambda: later)
    assert await answer(await api.get("/api/v2/jobs", headers=bearer(token))) == (
        401,
        "UnauthorizedUserError",
    )
    assert await answer(await api.get("/api/v2/jobs", headers=basic("admin", token))) == (
        401,
        "UnauthorizedUserError",
    )
    assert (await api.get("/api/v2/jobs", headers=bearer(forever))).status == 200
    listed = await (await api.get("/api/v2/tokens", headers=admin_headers)).json()
    assert token not in listed["tokens"]
    assert forever in listed["tokens"]


async def test_a_tokens_bad_name_or_expiry_is_refused_naming_the_field(
    api: Client, admin_headers: dict[str, str]
) -> None:
    for body, field in (
        ({"expiration": 10}, "expiration"),
        ({"expiration": "30d"}, "expiration"),
        ({"expiration": True}, "expiration"),
        ({"name": "x" * 65}, "name"),
        ({"name": 7}, "name"),
    ):
        response = await api.post("/api/v2/tokens/application", json=body, headers=admin_headers)
        refused = await response.json()
        assert (response.status, refused["code"], refused["field"]) == (400, "InvalidParametersError", field)
        assert refused["message"].startswith(field), refused
