"""The OpenID Connect provider as seen by the REST service: discovery, token exchange, id_token checks.

The provider's discovery document names its endpoints; it is fetched once and kept. An
id_token is accepted only when its signature verifies (asymmetric algorithms against the
provider's JWKS, fetched again once when a key id is unknown, so key rotation works; HS256
with the client secret, as OpenID Connect Core 10.1 allows), its issuer and audience are
ours, it has not expired and its nonce is the one this sign-in sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import jwt

LEEWAY_SECONDS = 60


class OidcError(Exception):
    """The provider could not be reached or its answer was refused; the message says why."""


@dataclass(frozen=True)
class OidcConfig:
    issuer: str
    discovery_url: str
    client_id: str
    client_secret: str
    scopes: str
    algorithms: tuple[str, ...]


@dataclass
class OidcProvider:
    config: OidcConfig
    metadata: dict[str, Any] | None = None
    keys: dict[str, jwt.PyJWK] = field(default_factory=dict)

    async def _get_json(self, url: str) -> dict[str, Any]:
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
                session.get(url) as response,
            ):
                if response.status != 200:
                    raise OidcError(f"{url} answered {response.status}")
                body = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise OidcError(f"{url}: {type(exc).__name__}") from exc
        if not isinstance(body, dict):
            raise OidcError(f"{url} did not answer a JSON object")
        return body

    async def discover(self) -> dict[str, Any]:
        if self.metadata is None:
            found = await self._get_json(self.config.discovery_url)
            for needed in ("authorization_endpoint", "token_endpoint"):
                if not isinstance(found.get(needed), str):
                    raise OidcError(f"the discovery document has no {needed}")
            self.metadata = found
        return self.metadata

    async def exchange(self, code: str, redirect_uri: str) -> dict[str, Any]:
        """The provider's token response for an authorization code (client_secret_post)."""
        endpoint = str((await self.discover())["token_endpoint"])
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "client_id": self.config.client_id,
            "client_secret": self.config.client_secret,
        }
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
                session.post(endpoint, data=form, headers={"Accept": "application/json"}) as response,
            ):
                body = await response.json(content_type=None)
                status = response.status
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise OidcError(f"token endpoint: {type(exc).__name__}") from exc
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("id_token"), str):
            error = body.get("error") if isinstance(body, dict) else None
            raise OidcError(
                f"the token endpoint refused the code ({status}{', ' + str(error) if error else ''})"
            )
        return body

    async def _key(self, header: dict[str, Any]) -> Any:
        algorithm = str(header.get("alg", ""))
        if algorithm.startswith("HS"):
            return self.config.client_secret.encode()
        kid = header.get("kid")
        for attempt in range(2):
            if attempt or not self.keys:
                jwks_uri = (await self.discover()).get("jwks_uri")
                if not isinstance(jwks_uri, str):
                    raise OidcError("the discovery document has no jwks_uri")
                self.keys = _key_set(await self._get_json(jwks_uri))
            if kid in self.keys:
                return self.keys[kid].key
            if kid is None and len(self.keys) == 1:
                return next(iter(self.keys.values())).key
        raise OidcError(f"no key {kid!r} in the provider's JWKS")

    async def verify(self, id_token: str, nonce: str) -> dict[str, Any]:
        """The id_token's claims, or OidcError naming what was wrong."""
        try:
            header = jwt.get_unverified_header(id_token)
        except jwt.PyJWTError as exc:
            raise OidcError(f"the id_token is malformed: {exc}") from exc
        algorithm = str(header.get("alg", ""))
        if algorithm not in self.config.algorithms:
            raise OidcError(
                f"the id_token is signed with {algorithm!r}, not one of {list(self.config.algorithms)}"
            )
        key = await self._key(header)
        try:
            claims: dict[str, Any] = jwt.decode(
                id_token,
                key,
                algorithms=[algorithm],
                audience=self.config.client_id,
                issuer=self.config.issuer,
                leeway=LEEWAY_SECONDS,
                options={"require": ["iss", "aud", "exp", "iat", "sub"]},
            )
        except jwt.PyJWTError as exc:
            raise OidcError(f"the id_token was refused: {exc}") from exc
        if claims.get("nonce") != nonce:
            raise OidcError("the id_token's nonce is not the one this sign-in sent")
        return claims


def _key_set(document: dict[str, Any]) -> dict[str, jwt.PyJWK]:
    keys: dict[str, jwt.PyJWK] = {}
    for position, entry in enumerate(document.get("keys") or []):
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        try:
            key = jwt.PyJWK(entry)
        except (jwt.PyJWTError, ValueError, TypeError, KeyError, json.JSONDecodeError):
            # An algorithm this installation cannot verify (or a malformed key): skip it.
            continue
        keys[str(entry.get("kid", position))] = key
    return keys
