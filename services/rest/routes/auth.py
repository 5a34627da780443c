"""Authentication routes: basic login (a token), logout (revoke it), cluster info.

Login accepts OpenPAI's form body (username, password, expiration in seconds) and JSON. The
password is checked off the event loop, after the account's backoff allows an attempt, and an
unknown user is answered exactly as a wrong password (services/rest/adapters/logins.py).
"""

from __future__ import annotations

import math
from typing import Any

from aiohttp import web

from services.rest.adapters import accounts
from services.rest.adapters.auth import require_interactive
from services.rest.core.errors import LOGIN_FAILED, TOO_MANY_REQUESTS, ApiError, invalid_parameters
from services.rest.keys import ENGINE, LOGIN_BACKOFF, PASSWORDS, SETTINGS, TOKENS
from services.rest.routes.bodies import read_json
from services.rest.routes.common import int_param

routes = web.RouteTableDef()


async def _credentials(request: web.Request) -> dict[str, Any]:
    if request.content_type == "application/json":
        body = await read_json(request, '{"username": "...", "password": "..."}')
        return body if isinstance(body, dict) else {}
    return dict(await request.post())


@routes.post("/v2/authn/basic/login")
async def basic_login(request: web.Request) -> web.Response:
    body = await _credentials(request)
    username, password = str(body.get("username") or ""), str(body.get("password") or "")
    if not username or not password:
        raise invalid_parameters("username and password are required.")
    settings = request.app[SETTINGS]
    expiration = int_param(
        str(body["expiration"]) if body.get("expiration") is not None else None,
        "expiration",
        default=settings.token_ttl_seconds,
        minimum=60,
        maximum=settings.token_ttl_seconds,
    )
    backoff = request.app[LOGIN_BACKOFF]
    wait = backoff.wait_seconds(username)
    if wait > 0:
        raise _later(wait, f"Too many failed sign-ins of {username}; retry in {math.ceil(wait)} s.")
    user = await accounts.get_user(request.app[ENGINE], username)
    # An unknown user costs a decoy's check: the same answer after the same work.
    valid = await request.app[PASSWORDS].verify(user["password_hash"] if user else None, password)
    if user is None or not valid:
        backoff.failed(username)
        raise LOGIN_FAILED()
    backoff.succeeded(username)
    token = await request.app[TOKENS].issue(username, bool(user["admin"]), expiration)
    return web.json_response({"token": token, "user": username, "admin": bool(user["admin"])})


def _later(seconds: float, hint: str) -> ApiError:
    refused = TOO_MANY_REQUESTS(hint)
    refused.headers["Retry-After"] = str(max(1, math.ceil(seconds)))
    return refused


# OpenPAI's first API version logs in here with the same form; older SDKs still call it.
routes.post("/v1/token")(basic_login)


@routes.delete("/v2/authn/basic/logout")
async def basic_logout(request: web.Request) -> web.Response:
    principal = require_interactive(request)
    await accounts.revoke_token(request.app[ENGINE], principal.token_id)
    return web.json_response({"message": "Logout successfully"})


@routes.get("/v2/info")
async def info(request: web.Request) -> web.Response:
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("pai-platform")
    except PackageNotFoundError:
        release = "unknown"
    settings = request.app[SETTINGS]
    return web.json_response(
        # OpenPAI's clients accept only "yarn" or "k8s"; ours runs FrameworkController-style,
        # which is what OpenPAI calls its k8s launcher.
        {
            "name": "pai",
            "version": release,
            "launcherType": "k8s",
            "authnMethod": "OIDC" if settings.oidc_issuer else "basic",
            "jobHistory": True,
            # What a job and a request may hold here (libs/protocol/limits.py, bodies.py).
            "limits": {**settings.job_limits().as_api(), "bodyBytes": settings.limit_body_bytes},
        }
    )
