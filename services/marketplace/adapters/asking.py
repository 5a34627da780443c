"""What the marketplace asks the public REST API: who a token is, which groups exist, the job limits.

It never reads rest's tables. Identities come from ``GET /api/v2/users/me`` through the shared
client (``libs/backbone/identities.py``, as the events gateway asks), the groups from
``GET /api/v2/groups`` with the caller's own token, the limits a submission is checked against
from ``GET /api/v2/info``; each answer is kept briefly.
"""

from __future__ import annotations

import re
import time

import aiohttp

from libs.backbone.identities import Identities, IdentityUnavailable
from libs.protocol.limits import DEFAULT_LIMITS, JobLimits
from libs.web.addresses import base_url
from services.marketplace.core.items import Caller

__all__ = ["IdentityUnavailable", "Rest"]


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


class Rest:
    def __init__(
        self, session: aiohttp.ClientSession, rest_url: str, ttl: float, limits_ttl: float = 60.0
    ) -> None:
        self._session = session
        self._base = base_url(rest_url)
        self._identities = Identities(session, rest_url, ttl)
        self._ttl = ttl
        self._limits_ttl = limits_ttl
        self._groups: tuple[float, frozenset[str]] | None = None
        self._limits: tuple[float, JobLimits] | None = None

    async def who(self, authorization: str) -> Caller | None:
        identity = await self._identities.who(authorization)
        if identity is None:
            return None
        return Caller(username=identity.username, admin=identity.admin, groups=identity.groups)

    async def _get(self, path: str, authorization: str | None = None) -> object:
        headers = {"Authorization": authorization} if authorization else {}
        try:
            async with self._session.get(
                self._base + path, headers=headers, timeout=aiohttp.ClientTimeout(total=10)
            ) as response:
                if response.status != 200:
                    raise IdentityUnavailable(f"REST answered {response.status} to GET {path}")
                return await response.json()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise IdentityUnavailable(str(exc) or type(exc).__name__) from exc

    async def groups(self, authorization: str) -> frozenset[str]:
        """Every group's name (any signed-in user may list them)."""
        now = time.monotonic()
        if self._groups is not None and self._groups[0] > now:
            return self._groups[1]
        body = await self._get("/api/v2/groups", authorization)
        names = (
            frozenset(
                str(group["groupname"]) for group in body if isinstance(group, dict) and "groupname" in group
            )
            if isinstance(body, list)
            else frozenset()
        )
        self._groups = (now + self._ttl, names)
        return names

    async def limits(self) -> JobLimits:
        """The limits REST checks every submission against (``limits`` of ``GET /api/v2/info``)."""
        now = time.monotonic()
        if self._limits is not None and self._limits[0] > now:
            return self._limits[1]
        body = await self._get("/api/v2/info")
        given = body.get("limits") if isinstance(body, dict) else None
        values = {_snake(k): v for k, v in given.items()} if isinstance(given, dict) else {}
        limits = DEFAULT_LIMITS.model_copy(
            update={k: v for k, v in values.items() if k in JobLimits.model_fields and isinstance(v, int)}
        )
        self._limits = (now + self._limits_ttl, limits)
        return limits
