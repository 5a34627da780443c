"""Who a token stands for, asked of the public REST API and remembered briefly.

The gateway never reads rest's tables: it sends the caller's own ``Authorization`` header to
``GET /api/v2/users/me`` (any valid token may read it) and keeps the answer ``ttl`` seconds, so
a stream of reconnects costs rest one request per token and period. A token REST refuses is
not remembered (the next try asks again).
"""

from __future__ import annotations

import time

import aiohttp
import structlog

from services.events.core.filters import Caller

log = structlog.get_logger(__name__)
MAX_ENTRIES = 10_000


class IdentityUnavailable(Exception):
    """REST did not answer; the caller gets 503 rather than a wrong answer."""


class Identities:
    def __init__(self, session: aiohttp.ClientSession, rest_url: str, ttl: float) -> None:
        self._session = session
        self._url = rest_url.rstrip("/") + "/api/v2/users/me"
        self._ttl = ttl
        self._known: dict[str, tuple[float, Caller]] = {}

    async def who(self, authorization: str) -> Caller | None:
        """The caller for an ``Authorization`` header value, or None when REST refuses it."""
        now = time.monotonic()
        known = self._known.get(authorization)
        if known is not None and known[0] > now:
            return known[1]
        try:
            async with self._session.get(
                self._url, headers={"Authorization": authorization}, timeout=aiohttp.ClientTimeout(total=10)
            ) as response:
                if response.status in (401, 403):
                    return None
                if response.status != 200:
                    raise IdentityUnavailable(f"REST answered {response.status}")
                body = await response.json()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise IdentityUnavailable(str(exc) or type(exc).__name__) from exc
        caller = Caller(username=str(body["username"]), admin=bool(body.get("admin")))
        if len(self._known) >= MAX_ENTRIES:
            self._known.clear()
        self._known[authorization] = (now + self._ttl, caller)
        return caller
