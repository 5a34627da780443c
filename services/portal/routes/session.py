"""Signing in and out: the sign-in page, the password form, OpenID Connect's start and return,
and the session's own description for the pages' scripts."""

from __future__ import annotations

import hmac
import html
import time
from urllib.parse import urlencode, urlsplit

from aiohttp import web

from services.portal.context import (
    REST,
    SEALER,
    SETTINGS,
    TEMPLATES,
    require_csrf,
    session_of,
    set_session_cookie,
)
from services.portal.core.pages import fill
from services.portal.core.security import COOKIE, CSRF_HEADER, Session, random_secret

LOGIN_COOKIE = "pai_login"
OIDC_STATE_COOKIE = "pai_portal_oidc"
OIDC_STATE_SECONDS = 600

HOME = "/home.html"


def _local(target: str | None) -> str:
    """Only this site's own pages are places to go after signing in.

    A path of this origin: one '/' then no second, no backslash, and no control character or
    space anywhere (browsers drop tabs and newlines from a URL, so `/\t/evil.example` would be
    `//evil.example`, another host); anything else goes home.
    """
    if not target or not target.startswith("/") or target.startswith("//"):
        return HOME
    if any(ch <= " " or ch in "\\\x7f" for ch in target):
        return HOME
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith("/") or parts.path.startswith("//"):
        return HOME
    return target


def sign_in_page(
    request: web.Request, *, error: str = "", status: int = 200, target: str = ""
) -> web.Response:
    nonce = request.cookies.get(LOGIN_COOKIE) or random_secret()
    settings = request.app[SETTINGS]
    oidc = ""
    if settings.oidc_issuer or settings.oidc_discovery_url:
        oidc = (
            '<p class="or"><span>or</span></p>'
            '<a class="button secondary wide" href="/portal/oidc/login">Sign in with OpenID Connect</a>'
        )
    body = fill(
        request.app[TEMPLATES]["index.html"],
        csrf=request.app[SEALER].csrf_token(nonce),
        next=html.escape(target or request.query.get("next", "")),
        error=f'<p class="error" role="alert">{html.escape(error)}</p>' if error else "",
        oidc=oidc,
    )
    response = web.Response(text=body, content_type="text/html", status=status)
    response.set_cookie(
        LOGIN_COOKIE,
        nonce,
        httponly=True,
        samesite="Strict",
        secure=settings.portal_secure_cookies,
        path="/portal/login",
    )
    return response


async def oidc_login(request: web.Request) -> web.StreamResponse:
    """Start an OpenID Connect sign-in: a state nonce of this browser, then REST's login.

    REST carries the state through the provider and comes back to ``/?code=&state=``; only the
    browser holding the state's cookie can trade that code, so a link carrying someone else's
    sign-in signs nobody in.
    """
    state = random_secret()
    response = web.HTTPFound("/api/v2/authn/oidc/login?" + urlencode({"portalState": state}))
    response.set_cookie(
        OIDC_STATE_COOKIE,
        state,
        max_age=OIDC_STATE_SECONDS,
        httponly=True,
        samesite="Lax",  # the return is a top-level navigation from the provider
        secure=request.app[SETTINGS].portal_secure_cookies,
        path="/",
    )
    raise response


async def _oidc_return(request: web.Request, code: str) -> web.StreamResponse:
    """Back from OpenID Connect: the code is traded for a token only with this browser's state."""
    expected = request.cookies.get(OIDC_STATE_COOKIE, "")
    state = request.query.get("state", "")
    if not expected or not hmac.compare_digest(expected, state):
        return sign_in_page(request, error="That sign-in was not started here; sign in again.", status=400)
    answer = await request.app[REST].redeem(code, state)
    if answer is None:
        return sign_in_page(request, error="That sign-in has expired; sign in again.", status=401)
    session = Session(
        str(answer["token"]),
        str(answer["user"]),
        bool(answer.get("admin")),
        int(time.time()) + _session_seconds(request),
    )
    response = web.HTTPFound(HOME)
    set_session_cookie(request, response, session)
    response.del_cookie(OIDC_STATE_COOKIE, path="/")
    raise response


async def index(request: web.Request) -> web.StreamResponse:
    # A token in the address is never taken (it was OpenPAI's OpenID return): whoever sent the
    # link would sign this browser in as themselves, and the token would sit in the history.
    code = request.query.get("code")
    if code:
        return await _oidc_return(request, code)
    if session_of(request) is not None:
        raise web.HTTPFound(_local(request.query.get("next")))
    return sign_in_page(request)


def _session_seconds(request: web.Request) -> int:
    return request.app[SETTINGS].portal_session_seconds


async def login(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    target = str(form.get("next") or "")
    nonce = request.cookies.get(LOGIN_COOKIE, "")
    if not nonce or not request.app[SEALER].csrf_ok(nonce, str(form.get("csrf") or "")):
        return sign_in_page(request, error="The sign-in form expired; try again.", status=403, target=target)
    username, password = str(form.get("username") or ""), str(form.get("password") or "")
    if not username or not password:
        return sign_in_page(request, error="Enter your user name and password.", status=400, target=target)
    seconds = _session_seconds(request)
    status, answer = await request.app[REST].login(username, password, seconds)
    if status != 200:
        message = str(answer.get("message") or "Sign-in failed.")
        return sign_in_page(request, error=message, status=401 if status < 500 else 502, target=target)
    session = Session(
        str(answer["token"]), str(answer["user"]), bool(answer["admin"]), int(time.time()) + seconds
    )
    response = web.HTTPFound(_local(target))
    set_session_cookie(request, response, session)
    response.del_cookie(LOGIN_COOKIE, path="/portal/login")
    raise response


async def logout(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    session = session_of(request)
    if session is not None:
        require_csrf(request, str(form.get("csrf") or "") or request.headers.get(CSRF_HEADER))
        await request.app[REST].logout(session.token)
    response = web.HTTPFound("/index.html")
    response.del_cookie(COOKIE, path="/")
    raise response


async def session_info(request: web.Request) -> web.Response:
    session = session_of(request)
    if session is None:
        return web.json_response({"code": "UnauthorizedUserError", "message": "Not signed in."}, status=401)
    csrf = request.app[SEALER].csrf_token(request.cookies.get(COOKIE, ""))
    settings = request.app[SETTINGS]
    return web.json_response(
        {
            "user": session.user,
            "admin": session.admin,
            "csrf": csrf,
            "pollSeconds": settings.portal_poll_seconds,
        },
        headers={"Cache-Control": "no-store"},
    )
