"""What every portal route reads: the application's keys, the pages' templates, the signed-in
session, the CSRF check.

The session middleware opens the session cookie once per request; `session_of` hands it to the
routes, and `require_csrf` guards every write a signed-in browser makes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from services.portal.adapters.rest import RestClient
from services.portal.core.security import COOKIE, Sealer, Session, same_origin
from services.portal.settings import PortalSettings

HERE = Path(__file__).resolve().parent
PAGES_DIR = HERE / "pages"
STATIC_DIR = HERE / "static"
# The npm packages the pages use in the browser, as installed from package-lock.json (make setup;
# the image's own npm stage): served from where npm put them, never copied into static/.
NODE_MODULES = HERE / "node_modules"
BROWSER_LIBS = {
    "yaml": NODE_MODULES / "yaml" / "browser" / "dist",
    # xterm.js: the job page's terminal in a running task (lib/xterm.mjs and css/xterm.css).
    "xterm": NODE_MODULES / "@xterm" / "xterm",
}


class Templates:
    """The pages' HTML (pages/*.html), read once when the application is built, not per request."""

    def __init__(self, folder: Path = PAGES_DIR) -> None:
        self._text = {path.name: path.read_text() for path in sorted(folder.glob("*.html"))}

    def __getitem__(self, name: str) -> str:
        return self._text[name]


SETTINGS = web.AppKey("settings", PortalSettings)
SEALER = web.AppKey("sealer", Sealer)
REST = web.AppKey("rest", RestClient)
VERSION = web.AppKey("version", str)
TEMPLATES = web.AppKey("templates", Templates)
SESSION: web.RequestKey[Session | None] = web.RequestKey("portal.session")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def session_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    cookie = request.cookies.get(COOKIE, "")
    request[SESSION] = request.app[SEALER].open(cookie, int(time.time())) if cookie else None
    return await handler(request)


def session_of(request: web.Request) -> Session | None:
    return request[SESSION]


def require_csrf(request: web.Request, presented: str | None) -> None:
    cookie = request.cookies.get(COOKIE, "")
    origin_ok = same_origin(request.headers.get("Origin"), request.host, request.scheme)
    if not origin_ok or not request.app[SEALER].csrf_ok(cookie, presented):
        raise web.HTTPForbidden(
            text=json.dumps(
                {
                    "code": "ForbiddenUserError",
                    "message": "This write lacks the page's CSRF token; reload the page and try again.",
                }
            ),
            content_type="application/json",
        )


def set_session_cookie(request: web.Request, response: web.StreamResponse, session: Session) -> None:
    settings = request.app[SETTINGS]
    response.set_cookie(
        COOKIE,
        request.app[SEALER].seal(session),
        max_age=max(60, session.expires - int(time.time())),
        httponly=True,
        samesite="Lax",
        secure=settings.portal_secure_cookies,
        path="/",
    )
