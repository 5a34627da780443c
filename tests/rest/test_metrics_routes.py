"""The metrics history and the alerts page's routes: asked of the monitor and the alerter over the bus."""

from __future__ import annotations

import json
from typing import Any

from aiohttp.test_utils import TestClient
from nats.aio.msg import Msg

from libs.backbone.connecting import Bus
from libs.protocol.subjects import ALERT_RULES_RPC, METRICS_HISTORY_RPC, RECENT_ALERTS_RPC
from tests.rest.jobs import job_yaml
from tests.rest.test_list_and_auth import submit
from tests.rest.test_users_groups import create_user

Client = TestClient[Any, Any]
NODE_LINE = {"node": "n1", "metric": "cpu", "points": [[1800000000.0, 12.5]]}


async def test_node_and_task_history_come_from_a_monitor_for_whom_may_read_them(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    asked: list[dict[str, Any]] = []

    async def monitor(msg: Msg) -> None:
        query = json.loads(msg.data)
        asked.append(query)
        rows = {"tasks": [{"role": "worker", "index": 0, "metric": "cpu", "points": []}]}
        answer = rows if query["job_id"] else {"nodes": [NODE_LINE]}
        await msg.respond(json.dumps({"step": 60, "keep": 21600, "now": 1.0} | answer).encode())

    sub = await bus.nc.subscribe(METRICS_HISTORY_RPC, cb=monitor)
    try:
        bob = await create_user(api, admin_headers, "bob")
        carol = await create_user(api, admin_headers, "carol")
        job_id = await submit(api, bob, job_yaml("trained"))
        nodes = await api.get("/api/v2/cluster/metrics?node=n1&since=1799990000", headers=admin_headers)
        assert nodes.status == 200
        assert (await nodes.json())["nodes"] == [NODE_LINE]
        assert (await api.get("/api/v2/cluster/metrics", headers=bob)).status == 403
        for who in (bob, admin_headers):
            tasks = await api.get("/api/v2/jobs/bob~trained/metrics", headers=who)
            assert tasks.status == 200
            body = await tasks.json()
            assert body["jobName"] == "bob~trained"
            assert body["tasks"][0]["role"] == "worker"
        refused = await api.get("/api/v2/jobs/bob~trained/metrics", headers=carol)
        assert refused.status == 403
        assert "bob" in (await refused.json())["message"]
        assert asked == [
            {"since": 1799990000.0, "node": "n1", "job_id": None},
            {"since": 0.0, "node": None, "job_id": job_id},
            {"since": 0.0, "node": None, "job_id": job_id},
        ]
        bad = await api.get("/api/v2/cluster/metrics?since=yesterday", headers=admin_headers)
        assert bad.status == 400
        assert "since" in (await bad.json())["message"]
        missing = await api.get("/api/v2/jobs/bob~absent/metrics", headers=bob)
        assert missing.status == 404
    finally:
        await sub.unsubscribe()


async def test_without_a_monitor_or_alerter_the_routes_answer_503_saying_what_to_check(
    api: Client, admin_headers: dict[str, str]
) -> None:
    for path, who in (
        ("/api/v2/cluster/metrics", "monitor"),
        ("/api/v2/alerts/recent", "alerter"),
        ("/api/v2/alerts/rules", "alerter"),
    ):
        response = await api.get(path, headers=admin_headers)
        assert response.status == 503, path
        body = await response.json()
        assert body["code"] == "ServiceUnavailableError"
        assert who in body["message"]
        assert response.headers["Retry-After"]


async def test_recent_alerts_and_rules_come_from_the_alerter_for_admins(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    asked: list[dict[str, Any]] = []
    resolved = [{"labels": {"alertname": "NodeNotReady"}, "status": "resolved"}]
    rules = {"source": "built-in", "rules": [{"alert": "NodeNotReady", "expr": "x > 0"}], "settings": {}}

    async def recent(msg: Msg) -> None:
        asked.append(json.loads(msg.data))
        await msg.respond(json.dumps(resolved).encode())

    async def rule_list(msg: Msg) -> None:
        await msg.respond(json.dumps(rules).encode())

    subs = [
        await bus.nc.subscribe(RECENT_ALERTS_RPC, cb=recent),
        await bus.nc.subscribe(ALERT_RULES_RPC, cb=rule_list),
    ]
    try:
        got = await api.get("/api/v2/alerts/recent?since=1700000000", headers=admin_headers)
        assert (got.status, await got.json()) == (200, resolved)
        assert asked == [{"user": "admin", "admin": True, "since": 1700000000.0}]
        listed = await api.get("/api/v2/alerts/rules", headers=admin_headers)
        assert (listed.status, await listed.json()) == (200, rules)
        bob = await create_user(api, admin_headers, "bob")
        assert (await api.get("/api/v2/alerts/rules", headers=bob)).status == 403
        assert (await api.get("/api/v2/alerts/recent", headers=bob)).status == 403
    finally:
        for sub in subs:
            await sub.unsubscribe()
