"""The REST API as the portal speaks it, always with the signed-in user's own token."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

import aiohttp

from libs.web.addresses import base_url, client_session

REFUSAL: ContextVar[dict[str, bytes] | None] = ContextVar("portal_refused_upgrade", default=None)
"""Set by a request that opens a WebSocket: what REST answered instead of the upgrade."""


async def _keep_refusal(_: Any, __: Any, params: aiohttp.TraceRequestEndParams) -> None:
    kept = REFUSAL.get()
    if kept is not None and params.response.status != 101:
        kept["body"] = await params.response.read()


class RestClient:
    def __init__(self, url: str) -> None:
        # http(s)://, or unix:/// REST's socket on this machine (libs/web/addresses.py).
        self.base = base_url(url)
        # No total timeout: proxied log reads and event streams may run long; connecting may not.
        self.http = client_session(
            url,
            connector_options={"limit": 200},
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=60),
            auto_decompress=False,
        )
        # WebSockets (`pai job exec`) on a session of their own, which keeps the body of a refused
        # upgrade (REST's error in OpenPAI's shape) for the one who asked (``refusal``).
        tracing = aiohttp.TraceConfig()
        tracing.on_request_end.append(_keep_refusal)
        self.sockets = client_session(url, trace_configs=[tracing])

    async def close(self) -> None:
        await self.http.close()
        await self.sockets.close()

    async def get_json(self, token: str, path: str, params: dict[str, str] | None = None) -> tuple[int, Any]:
        async with self.http.get(
            self.base + path, params=params, headers={"Authorization": f"Bearer {token}"}
        ) as response:
            try:
                return response.status, await response.json(content_type=None)
            except ValueError:
                return response.status, None

    async def me(self, token: str) -> dict[str, Any] | None:
        status, answer = await self.get_json(token, "/api/v2/users/me")
        return answer if status == 200 and isinstance(answer, dict) else None

    async def login(self, username: str, password: str, seconds: int) -> tuple[int, dict[str, Any]]:
        try:
            async with self.http.post(
                self.base + "/api/v2/authn/basic/login",
                json={"username": username, "password": password, "expiration": seconds},
            ) as response:
                answer = await response.json(content_type=None)
                return response.status, answer if isinstance(answer, dict) else {}
        except (aiohttp.ClientError, ValueError) as exc:
            return 502, {"message": f"The platform's API did not answer ({exc}); try again shortly."}

    async def redeem(self, code: str, state: str) -> dict[str, Any] | None:
        """The token and user of an OpenID Connect return's one-time code, or None when refused."""
        try:
            async with self.http.post(
                self.base + "/api/v2/authn/oidc/code", json={"code": code, "state": state}
            ) as response:
                answer = await response.json(content_type=None)
        except (aiohttp.ClientError, ValueError):
            return None
        ok = response.status == 200 and isinstance(answer, dict) and "token" in answer
        return answer if ok else None

    async def logout(self, token: str) -> None:
        async with self.http.delete(
            self.base + "/api/v2/authn/basic/logout", headers={"Authorization": f"Bearer {token}"}
        ):
            pass
