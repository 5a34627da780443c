"""OpenID Connect sign-in (OpenPAI's AAD mode): login, the provider's return, logout.

``login`` sends the browser to the provider's authorization endpoint with a fresh state and
nonce; both also travel in a short-lived cookie signed with the service's token secret, so
the return is accepted only in the browser that started it (no login CSRF) and by any
replica. ``return`` checks the state, exchanges the code at the token endpoint, verifies the
id_token (``adapters/oidc.py``), creates the user in the default group on first sign-in (as
OpenPAI does for AAD users), issues our own login token exactly as basic login does and
sends the browser to the portal with a one-time ``code`` and the ``state`` the portal gave
``login`` (``portalState``), never the token itself: OpenPAI put ``token`` in the query, so any
token in a link signed its follower in (login CSRF) and landed in histories and logs. The portal
checks ``state`` against its own cookie and trades the code for the token with
``POST /api/v2/authn/oidc/code {"code", "state"}`` (the code is the token encrypted with a key
derived from the token secret, bound to the state, good for 60 s and once per replica).
``logout`` revokes the caller's token when it has one and sends
the browser to the provider's end-session endpoint (or to the portal when it has none).

A cluster without OIDC settings answers these routes with 404 NoApiError, as OpenPAI does
in basic mode where they are not mounted, naming basic login as the way to sign in.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import secrets
import time
from typing import Any
from urllib.parse import urlencode

import jwt
import structlog
from aiohttp import web
from cryptography.fernet import Fernet, InvalidToken

from services.rest.adapters import accounts, contacts
from services.rest.adapters.auth import PRINCIPAL, Principal
from services.rest.adapters.oidc import OidcConfig, OidcError, OidcProvider
from services.rest.core.errors import NO_API, SIGN_IN_REFUSED, ApiError, invalid_parameters, unavailable
from services.rest.keys import BUS, ENGINE, SETTINGS, TOKENS
from services.rest.routes.bodies import read_json
from services.rest.settings import RestSettings

log = structlog.get_logger(__name__)
routes = web.RouteTableDef()

COOKIE = "pai_oidc"
COOKIE_SECONDS = 600
CODE_SECONDS = 60
# One provider (its discovery document and keys) per configuration, shared by the process.
PROVIDERS: dict[OidcConfig, OidcProvider] = {}
NOT_USERNAME = re.compile(r"[^\w.-]")


def _config(settings: RestSettings) -> OidcConfig | None:
    if not (settings.oidc_issuer and settings.oidc_client_id and settings.oidc_client_secret):
        return None
    issuer = settings.oidc_issuer.rstrip("/")
    return OidcConfig(
        issuer=settings.oidc_issuer,
        discovery_url=settings.oidc_discovery_url or issuer + "/.well-known/openid-configuration",
        client_id=settings.oidc_client_id,
        client_secret=settings.oidc_client_secret,
        scopes=settings.oidc_scopes,
        algorithms=settings.oidc_algorithms,
    )


def _provider(request: web.Request) -> OidcProvider:
    config = _config(request.app[SETTINGS])
    if config is None:
        raise NO_API(
            "This cluster signs in with basic login (POST /api/v2/authn/basic/login); OpenID Connect is "
            "not configured (an admin sets PAI_OIDC_ISSUER, PAI_OIDC_CLIENT_ID and PAI_OIDC_CLIENT_SECRET).",
            url=request.path_qs,
        )
    return PROVIDERS.setdefault(config, OidcProvider(config))


def _unreachable(exc: OidcError) -> ApiError:
    log.warning("oidc provider failed", error=str(exc))
    return unavailable(f"The sign-in provider cannot be used now ({exc}); retry later.")


def _redirect_uri(request: web.Request) -> str:
    configured = request.app[SETTINGS].oidc_redirect_uri
    if configured:
        return configured
    # The same prefix the login came in on (/api or /rest-server/api).
    prefix = request.path[: request.path.index("/v2/authn/oidc/")]
    return str(request.url.with_path(prefix + "/v2/authn/oidc/return").with_query(None))


@routes.get("/v2/authn/oidc/login")
async def oidc_login(request: web.Request) -> web.Response:
    """Sign in with the OpenID Connect provider: a redirect to its authorization endpoint."""
    provider = _provider(request)
    try:
        metadata = await provider.discover()
    except OidcError as exc:
        raise _unreachable(exc) from None
    state, nonce = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    portal_state = request.query.get("portalState", "")[:128]
    query = {
        "response_type": "code",
        "client_id": provider.config.client_id,
        "redirect_uri": _redirect_uri(request),
        "scope": provider.config.scopes,
        "state": state,
        "nonce": nonce,
    }
    response = web.HTTPFound(f"{metadata['authorization_endpoint']}?{urlencode(query)}")
    now = accounts.now_ms() // 1000
    sealed = jwt.encode(
        {"state": state, "nonce": nonce, "portal": portal_state, "iat": now, "exp": now + COOKIE_SECONDS},
        request.app[TOKENS].secret,
        algorithm="HS256",
    )
    response.set_cookie(
        COOKIE,
        sealed,
        max_age=COOKIE_SECONDS,
        httponly=True,
        samesite="Lax",
        path="/",
        secure=request.secure,
    )
    raise response


def _sealed(request: web.Request) -> dict[str, Any]:
    try:
        return jwt.decode(
            request.cookies.get(COOKIE, ""),
            request.app[TOKENS].secret,
            algorithms=["HS256"],
            options={"require": ["state", "nonce", "exp"]},
        )
    except jwt.PyJWTError:
        raise invalid_parameters(
            "The sign-in was not started in this browser or took too long; start again at "
            "/api/v2/authn/oidc/login."
        ) from None


def username_of(claims: dict[str, Any], claim: str) -> str:
    """Our user name for the provider's claims: the claim's value (an e-mail keeps its local part)."""
    value = claims.get(claim) or claims.get("email") or claims.get("sub")
    name = NOT_USERNAME.sub("_", str(value or "").split("@", 1)[0])[:128]
    if not name.strip("_.-"):
        raise invalid_parameters(f"The provider's id_token has no usable {claim} claim to name the user.")
    return name


@routes.get("/v2/authn/oidc/return")
async def oidc_return(request: web.Request) -> web.Response:
    """Where the provider sends the browser back: sign the user in and go to the portal."""
    provider = _provider(request)
    if "error" in request.query:
        detail = request.query.get("error_description") or request.query["error"]
        raise invalid_parameters(f"The sign-in provider refused the sign-in: {detail}")
    code, state = request.query.get("code", ""), request.query.get("state", "")
    if not code or not state:
        raise invalid_parameters("code and state are required; the provider sends them back after sign-in.")
    sealed = _sealed(request)
    if not secrets.compare_digest(str(sealed["state"]), state):
        raise invalid_parameters("The state does not match the sign-in this browser started; start again.")
    try:
        answer = await provider.exchange(code, _redirect_uri(request))
        claims = await provider.verify(str(answer["id_token"]), str(sealed["nonce"]))
    except OidcError as exc:
        log.warning("oidc sign-in refused", error=str(exc))
        raise SIGN_IN_REFUSED(reason=str(exc)) from None
    settings = request.app[SETTINGS]
    username = username_of(claims, settings.oidc_username_claim)
    engine = request.app[ENGINE]
    if await accounts.get_user(engine, username) is None:
        # First sign-in: a user without a password, in the default group.
        with contextlib.suppress(accounts.DuplicateError):
            await accounts.create_user(engine, username, "", email=str(claims.get("email") or ""))
        log.info("user created at first oidc sign-in", user=username)
        await contacts.share_contact(engine, request.app[BUS].bus.js, username)
    user = await accounts.get_user(engine, username)
    if user is None:
        raise unavailable("The user could not be stored; retry the sign-in.")
    token = await request.app[TOKENS].issue(username, bool(user["admin"]), settings.token_ttl_seconds)
    portal_state = str(sealed.get("portal") or "")
    code = _codes(request).seal(token, portal_state)
    target = {"code": code, "state": portal_state}
    separator = "&" if "?" in settings.oidc_portal_url else "?"
    response = web.HTTPFound(f"{settings.oidc_portal_url}{separator}{urlencode(target)}")
    response.del_cookie(COOKIE, path="/")
    raise response


class Codes:
    """One-time codes: the token encrypted and bound to the portal's state, redeemed once."""

    def __init__(self, secret: str) -> None:
        material = hashlib.sha256(b"pai-oidc-code\0" + secret.encode()).digest()
        self._fernet = Fernet(base64.urlsafe_b64encode(material))
        self._redeemed: dict[str, float] = {}

    def seal(self, token: str, state: str) -> str:
        body = json.dumps({"t": token, "s": state, "n": secrets.token_urlsafe(12)})
        return self._fernet.encrypt(body.encode()).decode()

    def redeem(self, code: str, state: str) -> str | None:
        """The token, when the code is fresh, unused and bound to ``state``."""
        now = time.monotonic()
        self._redeemed = {key: until for key, until in self._redeemed.items() if until > now}
        try:
            body = json.loads(self._fernet.decrypt(code.encode(), ttl=CODE_SECONDS))
        except (InvalidToken, ValueError):
            return None
        if not state or not secrets.compare_digest(str(body.get("s", "")), state):
            return None
        key = hashlib.sha256(code.encode()).hexdigest()
        if key in self._redeemed:
            return None
        self._redeemed[key] = now + CODE_SECONDS + 5
        return str(body["t"])


# One store per token secret, shared by the process (as PROVIDERS).
CODES: dict[str, Codes] = {}


def _codes(request: web.Request) -> Codes:
    secret = request.app[TOKENS].secret
    if secret not in CODES:
        CODES[secret] = Codes(secret)
    return CODES[secret]


@routes.post("/v2/authn/oidc/code")
async def oidc_code(request: web.Request) -> web.Response:
    """The portal trades the one-time code of a return (and the state it issued) for the token."""
    _provider(request)
    body = await read_json(request, '{"code": "...", "state": "..."}')
    if not isinstance(body, dict):
        raise invalid_parameters("The body must be a JSON object with code and state.")
    token = _codes(request).redeem(str(body.get("code") or ""), str(body.get("state") or ""))
    if token is None:
        raise SIGN_IN_REFUSED(reason="the code is unknown, used, expired or not this sign-in's")
    principal = await request.app[TOKENS].check(token)
    if principal is None:
        raise SIGN_IN_REFUSED(reason="the token was revoked")
    return web.json_response({"token": token, "user": principal.username, "admin": principal.admin})


@routes.get("/v2/authn/oidc/logout")
async def oidc_logout(request: web.Request) -> web.Response:
    """Sign out: revoke the caller's token and redirect to the provider's end-session page."""
    provider = _provider(request)
    principal: Principal | None = request.get(PRINCIPAL)
    if principal is not None and not principal.application:
        await accounts.revoke_token(request.app[ENGINE], principal.token_id)
    portal = request.app[SETTINGS].oidc_portal_url
    try:
        end_session = (await provider.discover()).get("end_session_endpoint")
    except OidcError as exc:
        raise _unreachable(exc) from None
    if isinstance(end_session, str) and end_session:
        query = urlencode({"client_id": provider.config.client_id, "post_logout_redirect_uri": portal})
        raise web.HTTPFound(f"{end_session}?{query}")
    raise web.HTTPFound(portal)
