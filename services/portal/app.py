"""The portal's aiohttp application: pages, sign-in, the API proxy and live updates.

The portal holds nothing of its own: every page is filled by its scripts from the public REST API
(proxied here under /api/v2, /rest-server/api/v2 and /marketplace/api with the signed-in user's
token added server-side) and refreshed from /portal/events.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import html
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import aiohttp
import structlog
import yaml
from aiohttp import web

from libs.protocol import JobProtocolError, parse_job
from libs.protocol.yamlsource import YamlTooLargeError, safe_load_bounded
from libs.web.jsonbody import MAX_DEPTH, json_depth
from services.portal.adapters.rest import RestClient
from services.portal.core import changes
from services.portal.core.pages import BY_PATH, Page, frame, may_open, may_open_job
from services.portal.core.problems import line_of
from services.portal.core.security import (
    COOKIE,
    CSRF_HEADER,
    SAFE_METHODS,
    SECURITY_HEADERS,
    Sealer,
    Session,
    as_key,
    new_key,
    random_secret,
    same_origin,
)
from services.portal.settings import PortalSettings

log = structlog.get_logger(__name__)

HERE = Path(__file__).resolve().parent
PAGES_DIR = HERE / "pages"
STATIC_DIR = HERE / "static"
LOGIN_COOKIE = "pai_login"
OIDC_STATE_COOKIE = "pai_portal_oidc"
OIDC_STATE_SECONDS = 600
# What the portal's own routes read (the editor's YAML, the form's JSON): REST's default body limit.
BODY_BYTES = 1024 * 1024

SETTINGS = web.AppKey("settings", PortalSettings)
SEALER = web.AppKey("sealer", Sealer)
REST = web.AppKey("rest", RestClient)
VERSION = web.AppKey("version", str)
SESSION = "portal.session"
GATEWAY_RETRY_SECONDS = 5.0
GATEWAY_ANSWER_SECONDS = 2.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Headers of a proxied request that the REST service should see; the rest stay here. Host too:
# REST derives the sign-in provider's return address from it (routes/oidc.py), which should be
# the portal's, the address the browser knows, and never the socket's placeholder host.
_FORWARD_REQUEST = ("Host", "Content-Type", "Accept", "Authorization", "X-Forwarded-For", "If-None-Match")
_DROP_RESPONSE = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}


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


async def versioned_static(request: web.Request) -> web.StreamResponse:
    """/static/v<version>/<file>: a file under an address that changes with the files, cached long."""
    name = request.match_info["name"]
    path = (STATIC_DIR / name).resolve()
    if request.match_info["version"] != request.app[VERSION] or not path.is_relative_to(STATIC_DIR):
        raise web.HTTPNotFound()
    if not path.is_file():
        raise web.HTTPNotFound()
    return web.FileResponse(path, headers={"Cache-Control": "public, max-age=31536000, immutable"})


def static_version() -> str:
    digest = hashlib.sha256()
    for path in sorted(STATIC_DIR.rglob("*")):
        if path.is_file():
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:12]


@web.middleware
async def session_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    cookie = request.cookies.get(COOKIE, "")
    request[SESSION] = request.app[SEALER].open(cookie, int(time.time())) if cookie else None
    return await handler(request)


def session_of(request: web.Request) -> Session | None:
    value: Session | None = request[SESSION]
    return value


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


# ---------------------------------------------------------------- sign in and out


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
    body = (PAGES_DIR / "index.html").read_text()
    body = (
        body.replace("{csrf}", request.app[SEALER].csrf_token(nonce))
        .replace("{next}", html.escape(target or request.query.get("next", "")))
        .replace("{error}", f'<p class="error" role="alert">{html.escape(error)}</p>' if error else "")
        .replace("{oidc}", oidc)
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


# ---------------------------------------------------------------- pages


def _refused(page_title: str, message: str, status: int) -> web.Response:
    body = (PAGES_DIR / "refused.html").read_text()
    text = body.replace("{title}", html.escape(page_title)).replace("{message}", html.escape(message))
    return web.Response(text=text, content_type="text/html", status=status)


def page_handler(page: Page) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        session = session_of(request)
        if session is None:
            target = request.path_qs
            raise web.HTTPFound("/index.html?" + urlencode({"next": target}))
        if not may_open(page, admin=session.admin):
            return _refused(page.title, "This page is for administrators.", 403)
        if page.path == "/job-detail.html":
            owner = request.query.get("username", "")
            if not owner or not request.query.get("jobName"):
                return _refused(page.title, "Name the job: ?username=USER&jobName=NAME.", 400)
            if not may_open_job(owner, user=session.user, admin=session.admin):
                return _refused(page.title, "This job belongs to another user.", 403)
        body = (PAGES_DIR / page.file).read_text()
        text = frame(page, body, user=session.user, admin=session.admin, version=request.app[VERSION])
        return web.Response(text=text, content_type="text/html", headers={"Cache-Control": "no-store"})

    return handler


# ---------------------------------------------------------------- validation, rendering


async def _bounded_text(request: web.Request) -> str:
    """The body as text, at most BODY_BYTES (413 past it, as REST answers)."""
    if (request.content_length or 0) > BODY_BYTES:
        raise web.HTTPRequestEntityTooLarge(max_size=BODY_BYTES, actual_size=request.content_length or 0)
    body = await request.content.read(BODY_BYTES + 1)
    if len(body) > BODY_BYTES:
        raise web.HTTPRequestEntityTooLarge(max_size=BODY_BYTES, actual_size=len(body))
    try:
        return body.decode(request.charset or "utf-8")
    except (UnicodeDecodeError, LookupError):
        raise web.HTTPBadRequest(text="The body is not text in its charset.") from None


async def validate(request: web.Request) -> web.Response:
    """The API's own validator (libs.protocol.parse_job) on the editor's YAML, before submitting."""
    if session_of(request) is None:
        raise web.HTTPUnauthorized()
    require_csrf(request, request.headers.get(CSRF_HEADER))
    text = await _bounded_text(request)
    config: Any = None
    try:
        # The limits REST's parsers keep: depth, and aliases counted as expanded.
        config = safe_load_bounded(text)
    except YamlTooLargeError as exc:
        problem = {"path": "", "message": str(exc), "hint": "flatten the YAML; no job needs so much"}
        return web.json_response({"valid": False, "problems": [problem], "config": None}, status=400)
    except (yaml.YAMLError, RecursionError):
        pass  # a syntax error: parse_job names its line below
    try:
        parse_job(text)
        problems: list[dict[str, Any]] = []
    except JobProtocolError as exc:
        problems = [{**problem.model_dump(), "line": line_of(problem.message)} for problem in exc.problems]
    answer = {"valid": not problems, "problems": problems, "config": config}
    return web.json_response(answer, dumps=lambda value: json.dumps(value, default=str))


async def render(request: web.Request) -> web.Response:
    """The form's job as YAML for the editor."""
    if session_of(request) is None:
        raise web.HTTPUnauthorized()
    require_csrf(request, request.headers.get(CSRF_HEADER))
    text = await _bounded_text(request)
    if json_depth(text) > MAX_DEPTH:
        raise web.HTTPBadRequest(text=f"The JSON is nested more than {MAX_DEPTH} levels deep (the limit).")
    try:
        config = json.loads(text)
    except ValueError:
        raise web.HTTPBadRequest(text="The body is not JSON.") from None
    text = yaml.safe_dump(config, sort_keys=False, allow_unicode=True, default_flow_style=False)
    return web.Response(text=text, content_type="text/yaml")


# ---------------------------------------------------------------- the API, proxied


async def proxy(request: web.Request) -> web.StreamResponse:
    headers = {name: request.headers[name] for name in _FORWARD_REQUEST if name in request.headers}
    if request.remote:
        # REST counts requests per client address: name the browser's (it trusts this hop only
        # when PAI_RATE_LIMIT_TRUSTED_PROXIES says so).
        forwarded = headers.get("X-Forwarded-For")
        headers["X-Forwarded-For"] = f"{forwarded}, {request.remote}" if forwarded else request.remote
    if "Authorization" not in headers:
        session = session_of(request)
        if session is not None:
            if request.method not in SAFE_METHODS:
                require_csrf(request, request.headers.get(CSRF_HEADER))
            headers["Authorization"] = f"Bearer {session.token}"
    body = await request.read() if request.can_read_body else None
    rest = request.app[REST]
    async with rest.http.request(
        request.method,
        rest.base + request.rel_url.raw_path_qs,
        headers=headers,
        data=body,
        allow_redirects=False,
    ) as upstream:
        response = web.StreamResponse(status=upstream.status)
        for name, value in upstream.headers.items():
            if name.lower() not in _DROP_RESPONSE:
                response.headers.add(name, value)
        await response.prepare(request)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
        return response


# ---------------------------------------------------------------- live updates


async def events(request: web.Request) -> web.StreamResponse:
    """Server-sent `change` events for what a page shows; the page fetches again on each.

    From the platform's event stream (GET /api/v2/events) when it exists; otherwise the portal
    asks REST every poll interval and sends an event only when the answer changed.
    """
    session = session_of(request)
    if session is None:
        raise web.HTTPUnauthorized()
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    rest = request.app[REST]
    job = request.query.get("job", "")
    filters = {key: request.query[key] for key in ("username", "vc", "types") if request.query.get(key)}
    if job:
        filters["job"] = job
    settings = request.app[SETTINGS]
    # The page went away (ConnectionResetError), the portal stops (its client closes), or the
    # session's token was revoked (the gateway ended its stream, REST answers 401).
    with contextlib.suppress(ConnectionResetError, aiohttp.ClientError, RuntimeError, SessionEnded):
        announce = True
        while not await _from_gateway(rest, session.token, filters, response):
            # No gateway, or it does not know the job yet (just submitted): ask REST for a while,
            # then try the gateway again.
            every = settings.portal_poll_seconds if job else settings.portal_list_poll_seconds
            until = asyncio.get_running_loop().time() + GATEWAY_RETRY_SECONDS
            await _by_polling(rest, session.token, request, response, every, until, announce=announce)
            announce = False
    return response


class SessionEnded(Exception):
    """REST refuses the session's token: live updates end (the page's next request signs in again)."""


async def _send(response: web.StreamResponse, kind: str, data: Any) -> None:
    await response.write(f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode())


async def _from_gateway(
    rest: RestClient, token: str, filters: dict[str, str], response: web.StreamResponse
) -> bool:
    """Relay the gateway's events as changes; False when the platform has no gateway."""
    try:
        # A gateway that has not answered within a few seconds (one that does not know the job
        # yet holds its answer) counts as absent for now.
        upstream = await asyncio.wait_for(
            rest.http.get(
                rest.base + "/api/v2/events",
                params=filters,
                headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"},
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
            ),
            timeout=GATEWAY_ANSWER_SECONDS,
        )
    except (aiohttp.ClientError, TimeoutError):
        return False
    async with upstream:
        if upstream.status != 200 or not upstream.content_type.startswith("text/event-stream"):
            return False
        await _send(response, "ready", {"source": "gateway"})
        data: list[str] = []
        async for raw in upstream.content:
            line = raw.decode(errors="replace").rstrip("\r\n")
            if line.startswith(":"):
                await response.write(b":\n\n")  # the gateway's keep-alive: notices a closed page
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
            elif not line and data:
                await _send(response, "change", {"event": "\n".join(data)})
                data = []
    return True


async def _by_polling(
    rest: RestClient,
    token: str,
    request: web.Request,
    response: web.StreamResponse,
    every: float,
    until: float,
    *,
    announce: bool,
) -> None:
    job = request.query.get("job", "")
    list_query = {
        key: request.query[key]
        for key in ("username", "vc", "state", "keyword", "offset", "limit", "order")
        if request.query.get(key)
    }
    if announce:
        await _send(response, "ready", {"source": "poll"})
    last = ""
    states: dict[str, str] = {}
    loop = asyncio.get_running_loop()
    while loop.time() < until:
        # A comment line each round: writing is how a closed page is noticed (the write fails),
        # so no poller outlives its page.
        await response.write(b":\n\n")
        if job:
            user, _, name = job.partition("~")
            status, answer = await rest.get_json(token, f"/api/v2/jobs/{quote(user)}~{quote(name)}")
            if status == 401:
                raise SessionEnded()
            fingerprint = changes.digest(answer)
            if last and fingerprint != last:
                state = answer.get("jobStatus", {}).get("state") if isinstance(answer, dict) else None
                change = {"job": job, "state": state, "status": status}
                if status == 200:
                    change["detail"] = answer
                await _send(response, "change", change)
            last = fingerprint
        else:
            status, answer = await rest.get_json(token, "/api/v2/jobs", {"limit": "100", **list_query})
            if status == 401:
                raise SessionEnded()
            items = answer if isinstance(answer, list) else []
            now = changes.job_states(items)
            fingerprint = changes.digest(answer)
            if last and fingerprint != last:
                await _send(response, "change", {"jobs": changes.changed_jobs(states, now)})
            last, states = fingerprint, now
        await asyncio.sleep(every)  # nothing to await: REST has no change feed without the gateway


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
    app.router.add_static("/static/", STATIC_DIR, append_version=False)
    # The marketplace's API too: REST passes /marketplace/api/ on to the marketplace service.
    for prefix in ("/api/", "/rest-server/api/", "/marketplace/api/"):
        app.router.add_route("*", prefix + "{tail:.*}", proxy)
    return app
