"""Who a token stands for, asked of the public REST API and remembered briefly.

Services beside rest (the events gateway, the marketplace) never read rest's tables: they send
the caller's own ``Authorization`` header to ``GET /api/v2/users/me`` (any valid token may read
it) and keep the answer ``ttl`` seconds, so a burst of requests costs rest one request per
token and period. A token REST refuses is not remembered (the next try asks again).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import aiohttp

from libs.web.addresses import base_url

MAX_ENTRIES = 10_000


class IdentityUnavailable(Exception):
    """REST did not answer; the caller gets 503 rather than a wrong answer."""


@dataclass(frozen=True)
class Identity:
    """A signed-in user as REST describes them: name, admin flag, groups."""

    username: str
    admin: bool = False
    groups: frozenset[str] = frozenset()


class Identities:
    def __init__(self, session: aiohttp.ClientSession, rest_url: str, ttl: float) -> None:
        # ``session`` reaches ``rest_url`` (libs/web/addresses.py: a socket's client for unix:///).
        self._session = session
        self._url = base_url(rest_url) + "/api/v2/users/me"
        self._ttl = ttl
        self._known: dict[str, tuple[float, Identity]] = {}

    async def who(self, authorization: str, max_age: float | None = None) -> Identity | None:
        """The identity for an ``Authorization`` header value, or None when REST refuses it.

        ``max_age`` (seconds) asks for an answer at most that old, shorter than ``ttl``: an open
        event stream re-checks its token so, to end soon after the token is revoked.
        """
        now = time.monotonic()
        known = self._known.get(authorization)
        fresh_for = self._ttl if max_age is None else min(self._ttl, max_age)
        if known is not None and known[0] - self._ttl + fresh_for > now:
            return known[1]
        try:
            async with self._session.get(
                self._url, headers={"Authorization": authorization}, timeout=aiohttp.ClientTimeout(total=10)
            ) as response:
                if response.status in (401, 403):
                    self._known.pop(authorization, None)  # refused now: no older answer stands
                    return None
                if response.status != 200:
                    raise IdentityUnavailable(f"REST answered {response.status}")
                body = await response.json()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise IdentityUnavailable(str(exc) or type(exc).__name__) from exc
        groups = body.get("grouplist")
        identity = Identity(
            username=str(body["username"]),
            admin=bool(body.get("admin")),
            groups=frozenset(str(g) for g in groups) if isinstance(groups, list) else frozenset(),
        )
        if len(self._known) >= MAX_ENTRIES:
            self._known.clear()
        self._known[authorization] = (now + self._ttl, identity)
        return identity
