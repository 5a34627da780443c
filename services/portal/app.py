"""The portal's aiohttp application: pages, sign-in, the API proxy and live updates.

The portal holds nothing of its own: every page is filled by its scripts from the public REST API
(proxied here under /api/v2, /rest-server/api/v2 and /marketplace/api with the signed-in user's
token added server-side) and refreshed from /portal/events.

This module composes the application: its state (context.py), the middleware, and the route
table; the handlers live in routes/ (session: sign-in and out; pages; editor: validate and
render; proxy: the API; live: /portal/events).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import structlog
from aiohttp import web

from services.portal.adapters.rest import RestClient
from services.portal.context import (
    REST,
    SEALER,
    SETTINGS,
    STATIC_DIR,
    TEMPLATES,
    VERSION,
    Templates,
    session_middleware,
)
from services.portal.core.pages import BY_PATH
from services.portal.core.security import SECURITY_HEADERS, Sealer, as_key, new_key
from services.portal.routes.editor import render, validate
from services.portal.routes.live import events
from services.portal.routes.pages import browser_lib, page_handler, static_version, versioned_static
from services.portal.routes.proxy import proxy
from services.portal.routes.session import index, login, logout, oidc_login, session_info
from services.portal.settings import PortalSettings

log = structlog.get_logger(__name__)


def load_key(settings: PortalSettings) -> bytes:
    """The session key: the operator's file (a Kubernetes Secret shared by replicas), else one made
    at first start in the data dir. Text that is not a Fernet key is turned into one (SHA-256)."""
    path = settings.portal_secret_file
    if path is not None and not path.exists():
        log.warning("session key file missing; using a key of this instance only", path=str(path))
        path = None
    if path is None:
        path = settings.data_dir / "portal-session.key"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(new_key())
    return as_key(path.read_bytes().strip())


# ---------------------------------------------------------------- middleware


async def security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """Every answer's security headers, set as its headers leave: pages, errors, and the streamed
    ones (the API proxied, live updates), whose headers are sent before their handler returns."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)


# ---------------------------------------------------------------- the application


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def rest_ctx(app: web.Application) -> AsyncIterator[None]:
    client = RestClient(app[SETTINGS].portal_rest_url)
    app[REST] = client
    yield
    await client.close()


def build_app(settings: PortalSettings, key: bytes | None = None) -> web.Application:
    app = web.Application(
        middlewares=[session_middleware],
        client_max_size=16 * 1024**2,
    )
    app.on_response_prepare.append(security_headers)
    app[VERSION] = static_version()
    app[TEMPLATES] = Templates()
    app[SETTINGS] = settings
    app[SEALER] = Sealer(key if key is not None else load_key(settings))
    app.cleanup_ctx.append(rest_ctx)
    app.router.add_get("/", index)
    app.router.add_get("/index.html", index)
    app.router.add_post("/portal/login", login)
    app.router.add_get("/portal/oidc/login", oidc_login)
    app.router.add_post("/portal/logout", logout)
    app.router.add_get("/portal/session", session_info)
    app.router.add_post("/portal/validate", validate)
    app.router.add_post("/portal/render", render)
    app.router.add_get("/portal/events", events)
    app.router.add_get("/healthz", healthz)
    for path, page in BY_PATH.items():
        app.router.add_get(path, page_handler(page))
    app.router.add_get("/static/v{version:[0-9a-f]+}/{name:[A-Za-z0-9_.-]+}", versioned_static)
    app.router.add_get(
        "/static/v{version:[0-9a-f]+}/lib/{package:[a-z0-9-]+}/{path:[A-Za-z0-9_./-]+}", browser_lib
    )
    app.router.add_static("/static/", STATIC_DIR, append_version=False)
    # The marketplace's API too: REST passes /marketplace/api/ on to the marketplace service.
    for prefix in ("/api/", "/rest-server/api/", "/marketplace/api/"):
        app.router.add_route("*", prefix + "{tail:.*}", proxy)
    return app
