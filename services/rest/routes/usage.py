"""`GET /api/v2/usage?from=&to=&by=user|vc`: GPU-hours, CPU-hours, jobs by final state and mean
wait per user or per VC over a period (default: the last 7 days).

Admins see every user's jobs; anyone else sees only their own (grouped by VC with ``by=vc``).
A bad parameter answers OpenPAI's 400 InvalidParametersError naming it and what it accepts.
"""

from __future__ import annotations

import time

from aiohttp import web

from services.rest.adapters.auth import require_user
from services.rest.adapters.usage import usage_sums
from services.rest.core.errors import invalid_parameters
from services.rest.core.usage import UsageQueryError, read_by, read_period, report
from services.rest.keys import READ_ENGINE

routes = web.RouteTableDef()


@routes.get("/v2/usage")
async def get_usage(request: web.Request) -> web.Response:
    """GPU-hours, CPU-hours, jobs by final state and mean wait per user or VC (a user: their own)."""
    principal = require_user(request)
    try:
        by = read_by(request.query.get("by"))
        period = read_period(request.query.get("from"), request.query.get("to"), int(time.time() * 1000))
    except UsageQueryError as exc:
        raise invalid_parameters(str(exc), parameter=exc.parameter) from None
    username = None if principal.admin else principal.username
    ran, ended, started = await usage_sums(request.app[READ_ENGINE], by, period, username)
    return web.json_response(report(by, period, ran, ended, started))
