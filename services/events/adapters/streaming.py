"""GET /api/v2/events: the bus as server-sent events, filtered by the caller's rights.

The response is ``text/event-stream``; each message's ``id`` is a cursor (core/cursors.py),
``event`` the catalog type and ``data`` the event's JSON as published (job configs travel with
secrets masked). ``Last-Event-ID`` (or ``?since=``) resumes right after that event; ``since=0``
replays from the beginning of what the bus keeps. An idle stream gets a comment line every
``events_keepalive_seconds``. A stream is tied to its token: every ``TOKEN_CHECK_SECONDS`` it
asks REST again (an answer at most that old), and ends once REST refuses the token (logout,
revocation, a password change, the user deleted); while REST does not answer it goes on.
"""

from __future__ import annotations

import asyncio
import contextlib

import nats.errors
from aiohttp import web

from libs.web.errors import forbidden, invalid, unauthorized, unavailable
from services.events.adapters.identity import IdentityUnavailable
from services.events.core import sse
from services.events.core.cursors import Cursor, parse_cursor
from services.events.core.filters import Caller, FilterError, parse_filter, refused_filter
from services.events.keys import HUB, IDENTITIES, SETTINGS

routes = web.RouteTableDef()
# Messages written at once when a subscriber has fallen behind.
WRITE_BATCH = 256
# How often an open stream checks that its token still counts.
TOKEN_CHECK_SECONDS = 2.0
# How soon a catching-up stream that lost the bus tries again.
REPLAY_RETRY_SECONDS = 0.5


async def _token_counts(request: web.Request) -> bool:
    """False once REST refuses the stream's token; True while it accepts it or does not answer."""
    header = request.headers.get("Authorization", "").strip()
    try:
        return await request.app[IDENTITIES].who(header, max_age=TOKEN_CHECK_SECONDS) is not None
    except IdentityUnavailable:
        return True


async def authenticate(request: web.Request, max_age: float | None = None) -> Caller:
    """The caller as the REST API knows them (an answer at most ``max_age`` old when given); 401
    without a token REST accepts."""
    header = request.headers.get("Authorization", "").strip()
    if not header:
        raise unauthorized()
    try:
        caller = await request.app[IDENTITIES].who(header, max_age)
    except IdentityUnavailable as exc:
        raise unavailable(f"The REST API did not confirm the token ({exc}); retry shortly.") from None
    if caller is None:
        raise unauthorized("The token is invalid, expired or revoked; log in again.")
    return caller


@routes.get("/v2/events")
async def events(request: web.Request) -> web.StreamResponse:
    caller = await authenticate(request, max_age=TOKEN_CHECK_SECONDS)
    try:
        flt = parse_filter(request.query)
        streams = flt.streams()
        resume, name = request.headers.get("Last-Event-ID"), "Last-Event-ID"
        if not resume:
            resume, name = request.query.get("since"), "since"
        start = parse_cursor(resume, streams, name) if resume else None
    except FilterError as exc:
        raise invalid(exc.message) from None
    refusal = refused_filter(caller, flt)
    if refusal is not None:
        raise forbidden(refusal)
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
                while True:
                    try:
                        async for item in hub.replay(
                            subscriber, stream, position.get(stream), reached[stream]
                        ):
                            position = position.advanced(stream, item.sequence)
                            await response.write(sse.message(position.text(), item.type, item.data))
                        break
                    except (nats.errors.Error, TimeoutError):
                        # The bus went away while the stream caught up: once it is back, read on
                        # from what was sent (the headers are out: an error now would be a broken
                        # stream, not an answer). The comment line finds a client that left.
                        await response.write(sse.KEEP_ALIVE)
                        await asyncio.sleep(REPLAY_RETRY_SECONDS)
            position = Cursor(tuple((s, max(position.get(s), reached[s])) for s in streams))
        else:
            await response.write(sse.KEEP_ALIVE)  # headers and a first byte: the stream is open
        single = len(streams) == 1
        ended = False
        loop = asyncio.get_running_loop()
        next_check = last_write = loop.time()
        while not ended:
            if loop.time() >= next_check:
                if not await _token_counts(request):
                    break  # revoked: the client's reconnect is refused with 401
                next_check = loop.time() + TOKEN_CHECK_SECONDS
            try:
                async with asyncio.timeout(max(0.0, min(next_check, last_write + keepalive) - loop.time())):
                    batch = [await subscriber.queue.get()]
            except TimeoutError:
                if loop.time() >= last_write + keepalive:
                    await response.write(sse.KEEP_ALIVE)
                    last_write = loop.time()
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
                last_write = loop.time()
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response
    except ConnectionError:
        return web.StreamResponse()  # the client went away
    finally:
        hub.unsubscribe(subscriber)
