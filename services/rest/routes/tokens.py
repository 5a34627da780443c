"""Token routes of OpenPAI's REST API v2: list one's tokens, create an application token, revoke.

Every route here needs a login token: an application token may neither mint another nor
list or revoke tokens (it serves job operations only). A token is revoked by its own text,
as OpenPAI's clients send it; only its owner may revoke it.
"""

from __future__ import annotations

from aiohttp import web

from services.rest.adapters import accounts
from services.rest.auth import require_interactive
from services.rest.errors import NOT_TOKEN_OWNER, invalid_parameters
from services.rest.keys import ENGINE, TOKENS

routes = web.RouteTableDef()


@routes.get("/v2/tokens")
async def list_tokens(request: web.Request) -> web.Response:
    """The caller's tokens that are neither expired nor revoked."""
    principal = require_interactive(request)
    rows = await accounts.active_tokens(request.app[ENGINE], principal.username)
    return web.json_response({"tokens": [request.app[TOKENS].encode(row) for row in rows]})


@routes.post("/v2/tokens/application")
async def create_application_token(request: web.Request) -> web.Response:
    """A token that does not expire, for scripts and pipelines."""
    principal = require_interactive(request)
    token = await request.app[TOKENS].issue_application(principal.username)
    return web.json_response({"token": token, "application": True})


@routes.delete("/v2/tokens/{token}")
async def revoke_token(request: web.Request) -> web.Response:
    """Revoke one of the caller's tokens."""
    principal = require_interactive(request)
    claims = request.app[TOKENS].claims(request.match_info["token"])
    if claims is None:
        raise invalid_parameters("token is not a token this cluster issued; copy it from GET /api/v2/tokens.")
    if claims["sub"] != principal.username:
        raise NOT_TOKEN_OWNER()
    await accounts.revoke_token(request.app[ENGINE], str(claims["jti"]))
    return web.json_response({"message": "revoke successfully"})
