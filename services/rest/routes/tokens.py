"""Token routes of OpenPAI's REST API v2: list one's tokens, create an application token, revoke.

Every route here needs a login token: an application token may neither mint another nor
list or revoke tokens (it serves job operations only). A token is revoked by its own text,
as OpenPAI's clients send it; only its owner may revoke it.

An application token may be given a ``name`` and an ``expiration`` in seconds (the word of
OpenPAI's login): both optional, so OpenPAI's clients, which send no body, still get a token
that never expires. The list keeps OpenPAI's ``tokens`` (the texts) and adds ``details``: each
token with its name, kind, creation and expiry.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from services.rest.adapters import accounts
from services.rest.adapters.auth import require_interactive
from services.rest.core.errors import NOT_TOKEN_OWNER, invalid_parameters
from services.rest.core.text import unstorable
from services.rest.keys import ENGINE, TOKENS
from services.rest.routes.users import field, json_body

routes = web.RouteTableDef()

MAX_NAME = 64
MIN_EXPIRATION = 60
MAX_EXPIRATION = 10 * 366 * 86400  # ten years


def _expires(stored_ms: int) -> int | None:
    return None if stored_ms >= accounts.NEVER_MS else stored_ms


@routes.get("/v2/tokens")
async def list_tokens(request: web.Request) -> web.Response:
    """The caller's tokens that are neither expired nor revoked."""
    principal = require_interactive(request)
    rows = await accounts.active_tokens(request.app[ENGINE], principal.username)
    texts = [request.app[TOKENS].encode(row) for row in rows]
    details = [
        {
            "token": text,
            "name": row.get("name") or "",
            "application": row["kind"] == "application",
            "createdTime": int(row["created_time"]),
            "expiresTime": _expires(int(row["expires_time"])),
        }
        for text, row in zip(texts, rows, strict=True)
    ]
    return web.json_response({"tokens": texts, "details": details})


def _expiration(body: dict[str, Any]) -> int | None:
    value = body.get("expiration")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_EXPIRATION <= value <= MAX_EXPIRATION:
        raise invalid_parameters(
            f"expiration must be a whole number of seconds from {MIN_EXPIRATION} to {MAX_EXPIRATION} "
            f"(ten years), got {value!r}; leave it out for a token that never expires.",
            field="expiration",
        )
    return value


def _name(body: dict[str, Any]) -> str:
    name = str(field(body, "name", str) or "").strip()
    if len(name) > MAX_NAME or unstorable(name):
        raise invalid_parameters(
            f"name must be at most {MAX_NAME} characters of text, such as 'nightly-ci'.", field="name"
        )
    return name


@routes.post("/v2/tokens/application")
async def create_application_token(request: web.Request) -> web.Response:
    """A token for scripts and pipelines: optionally named, expiring after ``expiration`` seconds
    (never without one)."""
    principal = require_interactive(request)
    body = await json_body(request) if request.body_exists else {}
    name, expiration = _name(body), _expiration(body)
    token = await request.app[TOKENS].issue_application(principal.username, name, expiration)
    claims = request.app[TOKENS].claims(token) or {}
    expires = int(claims["exp"]) * 1000 if "exp" in claims else None
    return web.json_response({"token": token, "application": True, "name": name, "expiresTime": expires})


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
