"""An OpenID Connect provider for tests: discovery, authorize (approves at once), token, JWKS.

It signs id_tokens with HS256 and the client secret (OpenID Connect Core 10.1) unless given
an RSA key (``cryptography`` must be installed for that). ``tamper`` changes what the next
id_token says or how it is signed, so tests can check what the service refuses.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import jwt
from aiohttp import web
from aiohttp.test_utils import TestServer

CLIENT_ID = "pai-portal"
CLIENT_SECRET = "client-secret-for-tests-0123456789abcdef"


@dataclass
class FakeIdp:
    email: str = "dana@example.com"
    end_session: bool = True
    private_key: Any = None  # an RSA private key (cryptography) to sign RS256 instead of HS256
    kid: str = "k1"
    tamper: dict[str, Any] = field(default_factory=dict)
    codes: dict[str, dict[str, str]] = field(default_factory=dict)
    exchanged: list[dict[str, str]] = field(default_factory=list)
    server: TestServer | None = None

    @property
    def issuer(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("")).rstrip("/")

    async def start(self) -> FakeIdp:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self.discovery)
        app.router.add_get("/authorize", self.authorize)
        app.router.add_post("/token", self.token)
        app.router.add_get("/jwks", self.jwks)
        self.server = TestServer(app)
        await self.server.start_server()
        return self

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()

    async def discovery(self, request: web.Request) -> web.Response:
        document = {
            "issuer": self.issuer,
            "authorization_endpoint": self.issuer + "/authorize",
            "token_endpoint": self.issuer + "/token",
            "jwks_uri": self.issuer + "/jwks",
        }
        if self.end_session:
            document["end_session_endpoint"] = self.issuer + "/logout"
        return web.json_response(document)

    async def authorize(self, request: web.Request) -> web.Response:
        query = request.query
        if query.get("client_id") != CLIENT_ID or query.get("response_type") != "code":
            return web.json_response({"error": "invalid_request"}, status=400)
        code = secrets.token_urlsafe(12)
        self.codes[code] = {"nonce": query["nonce"], "redirect_uri": query["redirect_uri"]}
        target = query["redirect_uri"] + "?" + urlencode({"code": code, "state": query["state"]})
        raise web.HTTPFound(target)

    async def token(self, request: web.Request) -> web.Response:
        form = await request.post()
        self.exchanged.append({key: str(value) for key, value in form.items()})
        grant = self.codes.pop(str(form.get("code")), None)
        if (
            grant is None
            or form.get("client_id") != CLIENT_ID
            or form.get("client_secret") != CLIENT_SECRET
            or form.get("redirect_uri") != grant["redirect_uri"]
        ):
            return web.json_response({"error": "invalid_grant"}, status=400)
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "aud": CLIENT_ID,
            "sub": "subject-" + self.email,
            "iat": now,
            "exp": now + 300,
            "nonce": grant["nonce"],
            "email": self.email,
            "preferred_username": self.email,
        }
        claims.update(self.tamper.get("claims", {}))
        if self.private_key is not None:
            id_token = jwt.encode(claims, self.private_key, algorithm="RS256", headers={"kid": self.kid})
        else:
            id_token = jwt.encode(claims, self.tamper.get("secret", CLIENT_SECRET), algorithm="HS256")
        return web.json_response({"access_token": "opaque", "token_type": "Bearer", "id_token": id_token})

    async def jwks(self, request: web.Request) -> web.Response:
        if self.private_key is None:
            return web.json_response({"keys": []})
        from jwt.algorithms import RSAAlgorithm

        public = RSAAlgorithm.to_jwk(self.private_key.public_key(), as_dict=True)
        return web.json_response({"keys": [{**public, "kid": self.kid, "use": "sig", "alg": "RS256"}]})
