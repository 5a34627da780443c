"""Alerts resolved lately and the alerting rules in effect, for the alerts page (admin only).

`GET /api/v2/alerts/recent?since=S`: the alerts resolved at `since` (seconds since the epoch;
default the last 6 hours) or later, newest first, in Alertmanager's alert shape with `endsAt`.
`GET /api/v2/alerts/rules`: the rules the alerter evaluates now (`source` says whether they were
stored by `pai alert-rules set` or are the built-in ones) and its evaluation settings. The
alerter owns both and answers over request/reply within a short timeout; a bus that is down is
answered at once with 503 ServiceUnavailableError.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import nats.errors
from aiohttp import web

from libs.protocol.subjects import ALERT_RULES_RPC, RECENT_ALERTS_RPC
from services.rest.auth import require_admin
from services.rest.availability import RETRY_AFTER_SECONDS, connected_bus
from services.rest.errors import SERVICE_UNAVAILABLE, ApiError, invalid_parameters

ALERTER_TIMEOUT = 3.0
RECENT_HOURS = 6

routes = web.RouteTableDef()


def alerter_silent(doing: str) -> ApiError:
    error = SERVICE_UNAVAILABLE(
        reason=f"{doing} was not done: the alerter did not answer within {ALERTER_TIMEOUT:g}s; check that "
        f"it is running (`pai up` starts it). Retry in {RETRY_AFTER_SECONDS} s.",
    )
    error.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return error


async def ask_alerter(request: web.Request, doing: str, subject: str, query: dict[str, Any]) -> Any:
    nc = connected_bus(request, doing).bus.nc
    try:
        reply = await nc.request(subject, json.dumps(query).encode(), timeout=ALERTER_TIMEOUT)
    except (TimeoutError, nats.errors.TimeoutError, nats.errors.NoRespondersError):
        raise alerter_silent(doing) from None
    answer = json.loads(reply.data or b"null")
    if isinstance(answer, dict) and "error" in answer:
        raise invalid_parameters(f"The alerter refused the question: {answer['error']}")
    return answer


@routes.get("/v2/alerts/recent")
async def recent_alerts(request: web.Request) -> web.Response:
    """Alerts resolved since ``since`` (default: the last 6 hours), newest first (admin only)."""
    principal = require_admin(request)
    value = request.query.get("since", "")
    since = time.time() - RECENT_HOURS * 3600
    if value != "":
        try:
            since = float(value)
        except ValueError:
            raise invalid_parameters(
                f"since must be a time in seconds since the epoch (e.g. 1767225600), got {value!r}."
            ) from None
        if not math.isfinite(since) or since < 0:
            raise invalid_parameters(f"since must be a non-negative number of seconds, got {value!r}.")
    query = {"user": principal.username, "admin": True, "since": since}
    return web.json_response(await ask_alerter(request, "Listing recent alerts", RECENT_ALERTS_RPC, query))


@routes.get("/v2/alerts/rules")
async def alert_rules(request: web.Request) -> web.Response:
    """The alerting rules in effect and where they come from (admin only)."""
    require_admin(request)
    return web.json_response(await ask_alerter(request, "Reading the alerting rules", ALERT_RULES_RPC, {}))
