"""GET /api/v2/alerts: the alerts firing now, as the alerter knows them.

The alerter owns alert state, so the route asks it over request/reply. Users see the alerts
about their own jobs; admins see every alert. The body is Alertmanager's v2 alert list, which
OpenPAI's alert tooling already reads.
"""

from __future__ import annotations

import json

import nats.errors
from aiohttp import web

from libs.protocol.subjects import ALERTS_RPC
from services.rest.adapters.auth import require_user
from services.rest.core.errors import unavailable
from services.rest.routes.availability import connected_bus

ALERTS_TIMEOUT = 5.0

routes = web.RouteTableDef()


@routes.get("/v2/alerts")
async def firing_alerts(request: web.Request) -> web.Response:
    principal = require_user(request)
    query = {"user": principal.username, "admin": principal.admin}
    try:
        reply = await connected_bus(request, "Listing alerts").bus.nc.request(
            ALERTS_RPC, json.dumps(query).encode(), timeout=ALERTS_TIMEOUT
        )
    except (TimeoutError, nats.errors.TimeoutError, nats.errors.NoRespondersError):
        raise unavailable(
            f"The alerter did not answer within {ALERTS_TIMEOUT:g}s; check that it is running "
            "(`pai up` starts it) and retry."
        ) from None
    answer = json.loads(reply.data or b"[]")
    if isinstance(answer, dict) and "error" in answer:
        raise unavailable(f"The alerter could not list alerts: {answer['error']}")
    return web.json_response(answer)
