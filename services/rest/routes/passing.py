"""Other services' paths at the API's own address, passed through to them as they come.

Some services have their own HTTP port: the events gateway (``/api/v2/events``,
``/api/v2/webhooks``) and the marketplace (``/marketplace/api/...``). On Kubernetes an Ingress
path rule sends those paths to them; where one process answers the API's address (the embedded
platform, docker-compose), rest passes them on: the request with its query, ``Authorization``,
``Last-Event-ID`` and body, the answer streamed back as it comes, so a stream of events flows
through without being held. A service that is not named, or does not answer, is a 503 in
OpenPAI's error shape. The URL is http(s):// to another host, or unix:/// the service's socket
on this machine (``libs/web/addresses.py``: the embedded platform's hops take no TCP port).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from libs.web.addresses import base_url, client_session
from services.rest.core.errors import SERVICE_UNAVAILABLE

PASSED_HEADERS = ("Authorization", "Last-Event-ID", "Content-Type", "Accept")
ANSWER_HEADERS = ("Content-Type", "Cache-Control", "X-Accel-Buffering", "Location", "X-Total-Count")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# Each upstream's client, by its name (an AppKey is made at a module's top level only).
_SESSIONS: web.AppKey[dict[str, aiohttp.ClientSession]] = web.AppKey("passing_sessions")


@dataclass(frozen=True)
class Upstream:
    """A service behind the API's address: what to call it in errors, and its base URL (or None)."""

    name: str
    url: str | None
    # Said when no URL is set: how to make the service available.
    absent: str = ""


def passer(upstream: Upstream) -> Handler:
    """A handler passing every request it gets to ``upstream`` at the same path and query."""
    base = base_url(upstream.url) if upstream.url else ""

    async def pass_on(request: web.Request) -> web.StreamResponse:
        if not upstream.url:
            raise SERVICE_UNAVAILABLE(
                reason=f"{upstream.name} is not running on this platform. {upstream.absent}"
            )
        url = base + request.rel_url.path_qs
        headers = {name: request.headers[name] for name in PASSED_HEADERS if name in request.headers}
        # body_exists, not can_read_body: the body middleware has already read (and kept) it
        body = await request.read() if request.body_exists else None
        try:
            answer = await request.app[_SESSIONS][upstream.name].request(
                request.method,
                url,
                headers=headers,
                data=body,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            )
        except aiohttp.ClientError:
            raise SERVICE_UNAVAILABLE(reason=f"{upstream.name} does not answer; retry shortly.") from None
        async with answer:
            response = web.StreamResponse(
                status=answer.status,
                headers={name: answer.headers[name] for name in ANSWER_HEADERS if name in answer.headers},
            )
            await response.prepare(request)
            try:
                async for chunk in answer.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except (ConnectionError, aiohttp.ClientError):
                pass  # either side went away: a stream ends, its client resumes by its last id
        return response

    pass_on.__doc__ = f"Served by {upstream.name}; see its documentation."
    return pass_on


def add_routes(app: web.Application, upstream: Upstream, routes: tuple[tuple[str, str], ...]) -> None:
    """Serve ``routes`` (method, path) by passing them to ``upstream``, through a client of its own
    (a socket's client reaches that socket only)."""
    if _SESSIONS not in app:
        app[_SESSIONS] = {}
    if upstream.url:
        url = upstream.url

        async def session_ctx(app: web.Application) -> AsyncIterator[None]:
            async with client_session(url, auto_decompress=False) as session:
                app[_SESSIONS][upstream.name] = session
                yield

        app.cleanup_ctx.append(session_ctx)
    handler = passer(upstream)
    for method, path in routes:
        app.router.add_route(method, path, handler)
