"""Who a token stands for, as the gateway's rights need it (``libs/backbone/identities.py`` asks).

The gateway never reads rest's tables: the shared client asks ``GET /api/v2/users/me`` with the
caller's own header and remembers the answer briefly; this adapter turns it into the core's
``Caller``.
"""

from __future__ import annotations

import aiohttp

from libs.backbone.identities import Identities as RestIdentities
from libs.backbone.identities import IdentityUnavailable
from services.events.core.filters import Caller

__all__ = ["Identities", "IdentityUnavailable"]


class Identities:
    def __init__(self, session: aiohttp.ClientSession, rest_url: str, ttl: float) -> None:
        self._rest = RestIdentities(session, rest_url, ttl)

    async def who(self, authorization: str, max_age: float | None = None) -> Caller | None:
        """The caller for an ``Authorization`` header value, or None when REST refuses it."""
        identity = await self._rest.who(authorization, max_age)
        return None if identity is None else Caller(username=identity.username, admin=identity.admin)
