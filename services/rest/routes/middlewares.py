"""The middlewares every REST request passes, besides the body and rate checks (bodies.py,
ratelimit.py): errors leave in OpenPAI's shape, text no name can hold is refused before any
query, and the caller's token is checked once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web
from sqlalchemy.exc import DBAPIError

from libs.backbone.space import database_full
from services.rest.adapters.auth import PRINCIPAL, credentials_of
from services.rest.core.errors import NO_API, UNKNOWN, ApiError, invalid_parameters
from services.rest.core.text import unstorable
from services.rest.keys import TOKENS
from services.rest.routes.availability import BUS_ERRORS, DATABASE, bus_refused, out_of_space

log = structlog.get_logger(__name__)

# PostgreSQL's character_not_in_repertoire and untranslatable_character.
UNSTORABLE_TEXT_STATES = frozenset({"22021", "22P05"})
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error leaves in OpenPAI's {code, message} shape; unexpected ones are logged, not shown."""
    try:
        return await handler(request)
    except ApiError as exc:
        return web.json_response(exc.body(), status=exc.status, headers=exc.headers or None)
    except BUS_ERRORS as exc:
        log.warning("bus unavailable", method=request.method, path=request.path, error=repr(exc))
        error = bus_refused(request, f"{request.method} {request.path}", exc)
        return web.json_response(error.body(), status=error.status, headers=error.headers or None)
    except DBAPIError as exc:
        if (full := database_full(exc)) is not None:
            # What a route did before the refused write may stand: "nothing changed" is not said.
            log.warning("database full", method=request.method, path=request.path, error=full)
            refused = out_of_space(f"{request.method} {request.path}", DATABASE, full, nothing_changed=False)
            return web.json_response(refused.body(), status=refused.status)
        if getattr(exc.orig, "sqlstate", None) not in UNSTORABLE_TEXT_STATES:
            log.exception("request failed", method=request.method, path=request.path)
            return _internal_error()
        # A body field carried text the database cannot hold (NUL, or a character its encoding
        # lacks): the caller's input, so a 400 naming it rather than a 500.
        refused = invalid_parameters(
            "The request contains a NUL or a character that cannot be stored; "
            "names and values use printable text only."
        )
        return web.json_response(refused.body(), status=refused.status)
    except web.HTTPException as exc:
        if exc.status in (404, 405):
            missing = NO_API(f"No route serves {request.method} {request.path}.", url=request.path_qs)
            return web.json_response(missing.body(), status=exc.status)
        raise
    except Exception:
        log.exception("request failed", method=request.method, path=request.path)
        return _internal_error()


def _internal_error() -> web.Response:
    error = UNKNOWN("The service log has the details.", reason="Internal error.")
    return web.json_response(error.body(), status=error.status)


@web.middleware
async def text_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse text no name can contain before it reaches a query: a clear 400, never a 500."""
    if unstorable(request.path) or any(unstorable(k) or unstorable(v) for k, v in request.query.items()):
        raise invalid_parameters(
            "The path or the query contains a NUL or an invalid character; names use printable text only."
        )
    return await handler(request)


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    found = credentials_of(request)
    if found is not None:
        principal = await request.app[TOKENS].check(found[1], found[0])
        if principal is not None:
            request[PRINCIPAL] = principal
    return await handler(request)
