"""Live updates: /portal/events relays the event gateway's stream as `change` events, or polls
REST and sends one when the answer changed."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp import web

from services.portal.adapters.rest import RestClient
from services.portal.context import REST, SETTINGS, session_of
from services.portal.core import changes

GATEWAY_RETRY_SECONDS = 5.0
GATEWAY_ANSWER_SECONDS = 2.0


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
