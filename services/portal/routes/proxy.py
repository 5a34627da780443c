"""The API, proxied: /api/v2, /rest-server/api/v2 and /marketplace/api with the signed-in user's
token added server-side (and the CSRF check on every write), its WebSockets (`pai job exec`) too."""

from __future__ import annotations

import aiohttp
from aiohttp import web

from libs.web.exec_stream import relay
from services.portal.adapters.rest import REFUSAL
from services.portal.context import REST, require_csrf, session_of
from services.portal.core.security import CSRF_HEADER, SAFE_METHODS

# Headers of a proxied request that the REST service should see; the rest stay here. Host too:
# REST derives the sign-in provider's return address from it (routes/oidc.py), which should be
# the portal's, the address the browser knows, and never the socket's placeholder host.
_FORWARD_REQUEST = ("Host", "Content-Type", "Accept", "Authorization", "X-Forwarded-For", "If-None-Match")
_DROP_RESPONSE = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}


async def proxy(request: web.Request) -> web.StreamResponse:
    if request.headers.get("Upgrade", "").lower() == "websocket":
        return await proxy_websocket(request)
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


async def proxy_websocket(request: web.Request) -> web.StreamResponse:
    """A WebSocket of the API (`pai job exec`), relayed both ways once REST has accepted it.

    A browser cannot set headers on a WebSocket, and sends its cookies to the portal's address
    from any page of the same site (another port of this host included), so the session's token
    is added only to an upgrade from this site's own pages (Origin) that carries the page's CSRF
    token in its query (``csrf``, removed before it reaches REST); a client with its own
    ``Authorization`` (the CLI) needs neither."""
    headers = {name: request.headers[name] for name in ("Host", "Authorization") if name in request.headers}
    if request.remote:
        headers["X-Forwarded-For"] = request.remote
    query = request.rel_url.query.copy()
    presented = query.pop("csrf", None)
    if "Authorization" not in headers:
        session = session_of(request)
        if session is not None:
            require_csrf(request, presented)
            headers["Authorization"] = f"Bearer {session.token}"
    rest = request.app[REST]
    refused: dict[str, bytes] = {}
    kept = REFUSAL.set(refused)
    try:
        upstream = await rest.sockets.ws_connect(
            rest.base + request.rel_url.raw_path, params=query, headers=headers
        )
    except aiohttp.WSServerHandshakeError as exc:
        return web.Response(status=exc.status, body=refused.get("body", b""), content_type="application/json")
    except aiohttp.ClientError:
        return web.json_response(
            {"code": "ServiceUnavailableError", "message": "The platform's API did not answer; retry."},
            status=503,
        )
    finally:
        REFUSAL.reset(kept)
    ws = web.WebSocketResponse(heartbeat=30)
    await ws.prepare(request)
    await relay(ws, upstream)
    return ws
