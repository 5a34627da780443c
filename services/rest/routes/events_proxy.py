"""/api/v2/events and /api/v2/webhooks at the API's own address, passed to the events gateway.

The gateway (services/events) is its own service; on Kubernetes an Ingress path rule sends
these paths to it. Where one process answers the API's address (the embedded platform,
docker-compose), rest passes them on when ``PAI_EVENTS_URL`` names the gateway: the request
with its query, ``Authorization``, ``Last-Event-ID`` and body, the answer streamed back as it
comes, so a stream of events flows through without being held.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from services.rest.errors import SERVICE_UNAVAILABLE
from services.rest.keys import EVENTS_SESSION, SETTINGS

PASSED_HEADERS = ("Authorization", "Last-Event-ID", "Content-Type", "Accept")
ANSWER_HEADERS = ("Content-Type", "Cache-Control", "X-Accel-Buffering", "Location")


async def pass_on(request: web.Request) -> web.StreamResponse:
    """Served by the events gateway (services/events); see its documentation."""
    base = request.app[SETTINGS].events_url or ""
    # The gateway serves the same paths under both prefixes.
    url = base.rstrip("/") + request.rel_url.path_qs
    headers = {name: request.headers[name] for name in PASSED_HEADERS if name in request.headers}
    # body_exists, not can_read_body: the body middleware has already read (and kept) it
    body = await request.read() if request.body_exists else None
    try:
        upstream = await request.app[EVENTS_SESSION].request(
            request.method,
            url,
            headers=headers,
            data=body,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )
    except aiohttp.ClientError:
        raise SERVICE_UNAVAILABLE(reason="The events gateway does not answer; retry shortly.") from None
    async with upstream:
        response = web.StreamResponse(
            status=upstream.status,
            headers={name: upstream.headers[name] for name in ANSWER_HEADERS if name in upstream.headers},
        )
        await response.prepare(request)
        try:
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
        except (ConnectionError, aiohttp.ClientError):
            pass  # either side went away: the stream ends, the client resumes by its last id
    return response


ROUTES = (
    ("GET", "/v2/events"),
    ("GET", "/v2/webhooks"),
    ("POST", "/v2/webhooks"),
    ("GET", "/v2/webhooks/{id}"),
    ("DELETE", "/v2/webhooks/{id}"),
    ("GET", "/v2/webhooks/{id}/deliveries"),
    ("POST", "/v2/webhooks/{id}/deliveries/{delivery}/redeliver"),
)


async def session_ctx(app: web.Application) -> AsyncIterator[None]:
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        app[EVENTS_SESSION] = session
        yield


def register(app: web.Application, prefixes: tuple[str, ...]) -> None:
    """The gateway's routes at this address, when ``PAI_EVENTS_URL`` names the gateway."""
    if not app[SETTINGS].events_url:
        return
    app.cleanup_ctx.append(session_ctx)
    for prefix in prefixes:
        for method, path in ROUTES:
            app.router.add_route(method, prefix + path, pass_on)
