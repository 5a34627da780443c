"""The bus being down, answered in one place: 503 ServiceUnavailableError with Retry-After.

Reads come from the SQL read model and never need the bus. What does need it (a submission,
a stop, a question to the scheduler, the orchestrator or the alerter, a stream or KV read)
asks ``connected_bus`` first: while the connection is down the request is refused at once
instead of waiting out a timeout, and the caller is told when to retry. Bus errors that
still escape a route (the bus went down mid-request) are turned into the same answer by the
error boundary (``app.py``) through ``BUS_ERRORS``.

A write refused because a disk is full is no outage: retrying in two seconds does not help,
freeing space does. ``out_of_space`` answers it with 507 InsufficientStorageError naming what is
full (the database, the message bus), and ``bus_refused`` tells a full bus from one that is away.
"""

from __future__ import annotations

import json
import math
from typing import Any

import nats.errors
from aiohttp import web

from libs.backbone.space import bus_full, filesystem_full
from services.rest.adapters.bus import PublishFailedError, RestBus
from services.rest.core.errors import INSUFFICIENT_STORAGE, SERVICE_UNAVAILABLE, ApiError, invalid_parameters
from services.rest.keys import BUS, SETTINGS

# The embedded bus is back within a second of a crash; a client retrying after this many
# seconds usually finds it up.
RETRY_AFTER_SECONDS = 2
BUS_ERRORS: tuple[type[Exception], ...] = (nats.errors.Error, PublishFailedError)
DATABASE = "the database"
MESSAGE_BUS = "the message bus"
FREE_SPACE_HINT = (
    "Free space on the filesystem that holds it (under `pai up`, the data dir's); the platform "
    "takes writes again once there is room, and nothing it stored is lost."
)


def bus_down(doing: str, detail: str | None = None) -> ApiError:
    """503 ServiceUnavailableError naming what could not be done, with Retry-After.

    ``detail`` says what the bus answered when it is up but did not confirm a change.
    """
    why = (
        f"the message bus did not confirm it ({detail})"
        if detail
        else "the message bus is down or restarting (reads such as job lists still answer)"
    )
    error = SERVICE_UNAVAILABLE(
        reason=f"{doing} was not done: {why}; nothing was changed. Retry in {RETRY_AFTER_SECONDS} s.",
    )
    error.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return error


def out_of_space(doing: str, what: str, detail: str, *, nothing_changed: bool = True) -> ApiError:
    """507 InsufficientStorageError: ``what`` (the database, the message bus) has no space left
    on device; ``detail`` is what it said. No Retry-After: only freed space makes a retry work."""
    after = "; nothing was changed." if nothing_changed else "."
    return INSUFFICIENT_STORAGE(
        FREE_SPACE_HINT, reason=f"{doing} was not done: {what} has no space left on device ({detail}){after}"
    )


def bus_refused(request: web.Request, doing: str, exc: Exception) -> ApiError:
    """The answer to a bus write that failed: 507 when the bus is out of space (JetStream said
    so, or its store is on this machine and that filesystem is full), else 503 as ``bus_down``."""
    detail = bus_full(exc)
    store = request.app[SETTINGS].nats_store_dir
    if detail is None and store is not None and filesystem_full(store):
        # A stream whose write met ENOSPC does not answer: the unconfirmed publish is the sign.
        detail = f"its store's filesystem is full; {exc}"
    if detail is not None:
        return out_of_space(doing, MESSAGE_BUS, detail)
    unconfirmed = isinstance(exc, PublishFailedError)
    return bus_down(doing, str(exc) if unconfirmed else None)


def connected_bus(request: web.Request, doing: str) -> RestBus:
    """The bus when it is connected; else raise ``bus_down(doing)`` without waiting."""
    bus = request.app[BUS]
    if not bus.bus.is_connected:
        raise bus_down(doing)
    return bus


def since_param(request: web.Request, default: float) -> float:
    """The ``since`` query parameter: seconds since the epoch, ``default`` when absent."""
    value = request.query.get("since", "")
    if value == "":
        return default
    try:
        since = float(value)
    except ValueError:
        raise invalid_parameters(
            f"since must be a time in seconds since the epoch (e.g. 1767225600), got {value!r}."
        ) from None
    if not math.isfinite(since) or since < 0:
        raise invalid_parameters(f"since must be a non-negative number of seconds, got {value!r}.")
    return since


async def ask_service(
    request: web.Request, doing: str, subject: str, query: dict[str, Any], *, service: str, wait: float
) -> Any:
    """One question to ``service`` over request/reply: 503 with Retry-After when the bus is down
    or no instance answers within ``wait`` seconds, 400 when the service refuses the question."""
    nc = connected_bus(request, doing).bus.nc
    try:
        reply = await nc.request(subject, json.dumps(query).encode(), timeout=wait)
    except (TimeoutError, nats.errors.TimeoutError, nats.errors.NoRespondersError):
        error = SERVICE_UNAVAILABLE(
            reason=f"{doing} was not done: the {service} did not answer within {wait:g}s; check that "
            f"it is running "
            f"(`pai up` starts it). Retry in {RETRY_AFTER_SECONDS} s.",
        )
        error.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        raise error from None
    answer = json.loads(reply.data or b"null")
    if isinstance(answer, dict) and "error" in answer:
        raise invalid_parameters(f"The {service} refused the question: {answer['error']}")
    return answer
