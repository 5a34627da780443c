"""The events gateway's table from an HTTP route to its handler.

The gateway's inputs are requests: the event stream (`GET /v2/events`, adapters/streaming.py)
and the webhooks' routes (adapters/hooks.py). Both read the caller's rights and filters through
the core (core/filters.py, core/webhooks.py) and serve from the adapters (the hub of the bus's
streams, the deliveries); app.py mounts this table under each prefix OpenPAI clients use.
"""

from __future__ import annotations

from aiohttp import web

from services.events.adapters import hooks, streaming

ROUTES: tuple[web.RouteDef, ...] = tuple(
    route for table in (streaming.routes, hooks.routes) for route in table if isinstance(route, web.RouteDef)
)
