"""GET /api/v2/events: the bus as server-sent events, filtered by the caller's rights.

The response is ``text/event-stream``; each message's ``id`` is a cursor (core/cursors.py),
``event`` the catalog type and ``data`` the event's JSON as published (job configs travel with
secrets masked). ``Last-Event-ID`` (or ``?since=``) resumes right after that event; ``since=0``
replays from the beginning of what the bus keeps. An idle stream gets a comment line every
``events_keepalive_seconds``.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

from libs.web.errors import invalid, unauthorized, unavailable
from services.events.adapters.identity import IdentityUnavailable
from services.events.core import sse
from services.events.core.cursors import Cursor, parse_cursor
from services.events.core.filters import Caller, FilterError, parse_filter
from services.events.keys import HUB, IDENTITIES, SETTINGS

routes = web.RouteTableDef()
# Messages written at once when a subscriber has fallen behind.
WRITE_BATCH = 256


async def authenticate(request: web.Request) -> Caller:
    """The caller as the REST API knows them; 401 without a token REST accepts."""
    header = request.headers.get("Authorization", "").strip()
    if not header:
        raise unauthorized()
    try:
        caller = await request.app[IDENTITIES].who(header)
    except IdentityUnavailable as exc:
        raise unavailable(f"The REST API did not confirm the token ({exc}); retry shortly.") from None
    if caller is None:
        raise unauthorized("The token is invalid, expired or revoked; log in again.")
    return caller


@routes.get("/v2/events")
async def events(request: web.Request) -> web.StreamResponse:
    caller = await authenticate(request)
    try:
        flt = parse_filter(request.query)
        streams = flt.streams()
        resume, name = request.headers.get("Last-Event-ID"), "Last-Event-ID"
        if not resume:
            resume, name = request.query.get("since"), "since"
        start = parse_cursor(resume, streams, name) if resume else None
    except FilterError as exc:
        raise invalid(exc.message) from None
    hub = request.app[HUB]
    keepalive = request.app[SETTINGS].events_keepalive_seconds
    subscriber, reached = hub.subscribe(caller, flt)
    try:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",  # proxies must not hold messages back
            }
        )
        await response.prepare(request)
        position = start or Cursor(tuple((s, reached[s]) for s in streams))
        if start is not None:
            for stream in streams:
                async for item in hub.replay(subscriber, stream, start.get(stream), reached[stream]):
                    position = position.advanced(stream, item.sequence)
                    await response.write(sse.message(position.text(), item.type, item.data))
            position = Cursor(tuple((s, max(position.get(s), reached[s])) for s in streams))
        else:
            await response.write(sse.KEEP_ALIVE)  # headers and a first byte: the stream is open
        single = len(streams) == 1
        ended = False
        while not ended:
            try:
                async with asyncio.timeout(keepalive):
                    batch = [await subscriber.queue.get()]
            except TimeoutError:
                await response.write(sse.KEEP_ALIVE)
                continue
            # Whatever else is already queued leaves in the same write (cheaper under load).
            while not subscriber.queue.empty() and len(batch) < WRITE_BATCH:
                batch.append(subscriber.queue.get_nowait())
            chunks = []
            for next_item in batch:
                if next_item is None:
                    ended = True  # too slow, or the gateway stops: the client resumes by its last id
                    break
                if next_item.sequence <= position.get(next_item.stream):
                    continue
                position = position.advanced(next_item.stream, next_item.sequence)
                # One stream: the id is the sequence, the same bytes for every subscriber.
                chunks.append(next_item.message() if single else next_item.message(position.text()))
            if chunks:
                await response.write(b"".join(chunks))
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response
    except ConnectionError:
        return web.StreamResponse()  # the client went away
    finally:
        hub.unsubscribe(subscriber)
