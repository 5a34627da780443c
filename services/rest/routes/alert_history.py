"""Alerts resolved lately and the alerting rules in effect, for the alerts page (admin only).

`GET /api/v2/alerts/recent?since=S`: the alerts resolved at `since` (seconds since the epoch;
default the last 6 hours) or later, newest first, in Alertmanager's alert shape with `endsAt`.
`GET /api/v2/alerts/rules`: the rules the alerter evaluates now (`source` says whether they were
stored by `pai alert-rules set` or are the built-in ones) and its evaluation settings. The
alerter owns both and answers over request/reply within a short timeout; a bus that is down is
answered at once with 503 ServiceUnavailableError.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from libs.protocol.subjects import ALERT_RULES_RPC, RECENT_ALERTS_RPC
from services.rest.adapters.auth import require_admin
from services.rest.routes.availability import ask_service, since_param

ALERTER_TIMEOUT = 3.0
RECENT_HOURS = 6

routes = web.RouteTableDef()


async def ask_alerter(request: web.Request, doing: str, subject: str, query: dict[str, Any]) -> Any:
    return await ask_service(request, doing, subject, query, service="alerter", wait=ALERTER_TIMEOUT)


@routes.get("/v2/alerts/recent")
async def recent_alerts(request: web.Request) -> web.Response:
    """Alerts resolved since ``since`` (default: the last 6 hours), newest first (admin only)."""
    principal = require_admin(request)
    since = since_param(request, time.time() - RECENT_HOURS * 3600)
    query = {"user": principal.username, "admin": True, "since": since}
    return web.json_response(await ask_alerter(request, "Listing recent alerts", RECENT_ALERTS_RPC, query))


@routes.get("/v2/alerts/rules")
async def alert_rules(request: web.Request) -> web.Response:
    """The alerting rules in effect and where they come from (admin only)."""
    require_admin(request)
    return web.json_response(await ask_alerter(request, "Reading the alerting rules", ALERT_RULES_RPC, {}))
