"""/marketplace/api/... at the API's own address, passed to the marketplace (services/marketplace).

On Kubernetes the Ingress sends ``/marketplace/api`` to the marketplace's Service; rest passes
the same path when ``PAI_MARKETPLACE_URL`` names it (the embedded platform, docker-compose, and
in-cluster clients of pai-rest such as the portal). Without it every such request is a 503
saying so, rather than a 404 that reads like a wrong address.
"""

from __future__ import annotations

from aiohttp import web

from services.rest.keys import SETTINGS
from services.rest.routes.passing import Upstream, add_routes

PATH = "/marketplace/api"


def register(app: web.Application) -> None:
    upstream = Upstream(
        "The marketplace",
        app[SETTINGS].marketplace_url,
        absent="An operator starts it (services/marketplace) and sets PAI_MARKETPLACE_URL for rest.",
    )
    add_routes(app, upstream, (("*", PATH), ("*", PATH + "/{tail:.*}")))
