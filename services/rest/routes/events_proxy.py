"""/api/v2/events and /api/v2/webhooks at the API's own address, passed to the events gateway.

The gateway (services/events) is its own service; on Kubernetes an Ingress path rule sends
these paths to it. Where one process answers the API's address (the embedded platform,
docker-compose), rest passes them on when ``PAI_EVENTS_URL`` names the gateway (``passing.py``).
"""

from __future__ import annotations

from aiohttp import web

from services.rest.keys import SETTINGS
from services.rest.routes.passing import Upstream, add_routes

ROUTES = (
    ("GET", "/v2/events"),
    ("GET", "/v2/webhooks"),
    ("POST", "/v2/webhooks"),
    ("GET", "/v2/webhooks/{id}"),
    ("DELETE", "/v2/webhooks/{id}"),
    ("GET", "/v2/webhooks/{id}/deliveries"),
    ("POST", "/v2/webhooks/{id}/deliveries/{delivery}/redeliver"),
)


def register(app: web.Application, prefixes: tuple[str, ...]) -> None:
    """The gateway's routes at this address, when ``PAI_EVENTS_URL`` names the gateway."""
    url = app[SETTINGS].events_url
    if not url:
        return
    # The gateway serves the same paths under both prefixes.
    add_routes(
        app,
        Upstream("The events gateway", url),
        tuple((method, prefix + path) for prefix in prefixes for method, path in ROUTES),
    )
