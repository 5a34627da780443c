"""GET /api/v2/alerts answers from the alerter: who asks decides what is seen."""

from __future__ import annotations

import json
from typing import Any

from aiohttp.test_utils import TestClient
from nats.aio.msg import Msg

from libs.backbone.connecting import Bus
from libs.protocol.subjects import ALERTS_RPC
from services.rest.adapters import accounts
from services.rest.adapters.auth import hash_password
from services.rest.keys import ENGINE

Client = TestClient[Any, Any]
FIRING = {"labels": {"alertname": "JobFailed", "user": "eve"}, "status": {"state": "active"}}


async def test_alerts_come_from_the_alerter_for_the_caller(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    asked: list[dict[str, Any]] = []

    async def alerter(msg: Msg) -> None:
        query = json.loads(msg.data)
        asked.append(query)
        await msg.respond(json.dumps([FIRING] if query["admin"] or query["user"] == "eve" else []).encode())

    sub = await bus.nc.subscribe(ALERTS_RPC, cb=alerter)
    try:
        await accounts.create_user(api.app[ENGINE], "bob", hash_password("bob-password"))
        login = await api.post(
            "/api/v2/authn/basic/login", data={"username": "bob", "password": "bob-password"}
        )
        bob = {"Authorization": f"Bearer {(await login.json())['token']}"}
        admin_view = await api.get("/api/v2/alerts", headers=admin_headers)
        assert (admin_view.status, await admin_view.json()) == (200, [FIRING])
        bob_view = await api.get("/rest-server/api/v2/alerts", headers=bob)
        assert (bob_view.status, await bob_view.json()) == (200, [])
        assert asked == [{"user": "admin", "admin": True}, {"user": "bob", "admin": False}]
        anonymous = await api.get("/api/v2/alerts")
        assert anonymous.status == 401
    finally:
        await sub.unsubscribe()


async def test_alerts_without_an_alerter_answer_503_saying_what_to_check(
    api: Client, admin_headers: dict[str, str]
) -> None:
    response = await api.get("/api/v2/alerts", headers=admin_headers)
    assert response.status == 503
    assert "alerter" in (await response.json())["message"]
