"""Authentication: password hashes, signed tokens, the admin created at first start.

Passwords are stored as argon2 hashes. Tokens are HS256 JWTs whose signing secret is made
once and kept in the data dir (so tokens survive a restart); each token's id is also stored
so it can be revoked. Login tokens expire; application tokens (for scripts) carry the name
their owner gave them and expire when their owner chose (never, as OpenPAI's do, unless asked),
and may only be used for job operations, as OpenPAI's API reference states. Expiry is judged by
one clock, ``accounts.now_ms``: the stored row's ``expires_time`` and the token's ``exp``. A token travels as
``Authorization: Bearer <token>`` or, as OpenPAI also accepts, ``Basic base64(user:token)``.
Routes read the caller from ``request[PRINCIPAL]``; ``require_user`` turns a missing or bad
token into OpenPAI's 401, ``require_admin`` and ``require_interactive`` answer 403.

The claims hold no rights (admin, VCs): those are read from the groups on every request, so
a change of a user's groups applies at once, and a listed token re-encodes byte for byte from
its stored row (HS256 is deterministic), which is how ``GET /v2/tokens`` lists tokens without
storing them.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import secrets
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import structlog
from aiohttp import web
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy.ext.asyncio import AsyncEngine

from services.rest.adapters import accounts
from services.rest.core.errors import APPLICATION_TOKEN, BAD_TOKEN, GUEST, NON_ADMIN

log = structlog.get_logger(__name__)

ALGORITHM = "HS256"
_hasher = PasswordHasher()


@dataclass(frozen=True)
class Principal:
    """The authenticated caller of a request."""

    username: str
    admin: bool
    token_id: str
    application: bool = False
    virtual_clusters: tuple[str, ...] = ()

    def may_use(self, virtual_cluster: str) -> bool:
        return self.admin or virtual_cluster in self.virtual_clusters


PRINCIPAL = web.RequestKey("principal", Principal)


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    if not password_hash:
        return False
    try:
        return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def load_or_create_secret(path: Path) -> str:
    """The token signing secret, created on first start with owner-only permissions."""
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(48)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value)
    return value


def _claims(
    username: str, jti: str, issued_s: int, expires_s: int | None, application: bool = False
) -> dict[str, Any]:
    claims: dict[str, Any] = {"sub": username, "jti": jti, "iat": issued_s}
    if application:
        claims["application"] = True
    if expires_s is not None:
        claims["exp"] = expires_s
    return claims


def expired(claims: dict[str, Any]) -> bool:
    """Whether a token's ``exp`` has passed by the platform's clock (no ``exp``: never)."""
    expires = claims.get("exp")
    return isinstance(expires, int | float) and expires * 1000 <= accounts.now_ms()


@dataclass(frozen=True)
class Tokens:
    """Issues and checks tokens against the signing secret and the tokens table."""

    engine: AsyncEngine
    secret: str

    async def issue(self, username: str, admin: bool, ttl_seconds: int) -> str:
        """A login token expiring after ``ttl_seconds`` (``admin`` is kept for callers' sake)."""
        del admin  # rights are read from the groups at each request
        jti, issued = uuid.uuid4().hex, accounts.now_ms() // 1000
        expires = issued + ttl_seconds
        await accounts.record_token(self.engine, jti, username, expires * 1000, "user", issued * 1000)
        return jwt.encode(_claims(username, jti, issued, expires), self.secret, algorithm=ALGORITHM)

    async def issue_application(self, username: str, name: str = "", ttl_seconds: int | None = None) -> str:
        """A token for scripts, named by its owner, expiring after ``ttl_seconds`` (None: never);
        revoked by ``DELETE /v2/tokens/{token}``."""
        jti, issued = uuid.uuid4().hex, accounts.now_ms() // 1000
        expires = None if ttl_seconds is None else issued + ttl_seconds
        await accounts.record_token(
            self.engine,
            jti,
            username,
            accounts.NEVER_MS if expires is None else expires * 1000,
            "application",
            issued * 1000,
            name,
        )
        claims = _claims(username, jti, issued, expires, application=True)
        return jwt.encode(claims, self.secret, algorithm=ALGORITHM)

    def encode(self, row: dict[str, Any]) -> str:
        """The token a stored row was issued as."""
        issued = int(row["created_time"]) // 1000
        application = row["kind"] == "application"
        never = application and int(row["expires_time"]) >= accounts.NEVER_MS
        expires = None if never else int(row["expires_time"]) // 1000
        return jwt.encode(
            _claims(row["username"], row["jti"], issued, expires, application),
            self.secret,
            algorithm=ALGORITHM,
        )

    def claims(self, token: str) -> dict[str, Any] | None:
        """Verified claims, expiry not checked (revoking an expired token is harmless)."""
        try:
            decoded: dict[str, Any] = jwt.decode(
                token,
                self.secret,
                algorithms=[ALGORITHM],
                options={"require": ["sub", "jti"], "verify_exp": False},
            )
        except jwt.PyJWTError:
            return None
        return decoded

    async def check(self, token: str, username: str | None = None) -> Principal | None:
        """The caller a token stands for; ``username`` (from a basic header) must match it."""
        try:
            claims = jwt.decode(
                token, self.secret, algorithms=[ALGORITHM], options={"require": ["sub", "jti"]}
            )
        except jwt.PyJWTError:
            return None
        if expired(claims):
            return None
        subject, jti = str(claims["sub"]), str(claims["jti"])
        if username is not None and username != subject:
            return None
        kind = await accounts.token_kind(self.engine, jti, subject)
        if kind is None:
            return None
        user = await accounts.get_user(self.engine, subject)
        if user is None:
            return None
        return Principal(
            username=subject,
            admin=bool(user["admin"]),
            token_id=jti,
            application=kind == "application",
            virtual_clusters=tuple(user["virtual_clusters"]),
        )


def _write_private(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    return path


async def ensure_admin(engine: AsyncEngine, username: str, password: str | None, data_dir: Path) -> None:
    """Create the admin at first start; a generated password is written for the operator."""
    if await accounts.get_user(engine, username) is not None:
        return
    if not password:
        password = secrets.token_urlsafe(16)
        target = _write_private(data_dir / "admin-password", password + "\n")
        log.warning("admin created with a generated password", user=username, password_file=str(target))
    # Another replica starting at the same moment may have created it first.
    with contextlib.suppress(accounts.DuplicateError):
        await accounts.create_user(engine, username, hash_password(password), admin=True)


def credentials_of(request: web.Request) -> tuple[str | None, str] | None:
    """(user or None, token) from a Bearer header or a Basic ``user:token`` header."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    value = value.strip()
    if not value:
        return None
    if scheme.lower() == "bearer":
        return None, value
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        user, sep, token = decoded.partition(":")
        return (user, token) if sep and user and token else None
    return None


def bearer_of(request: web.Request) -> str | None:
    found = credentials_of(request)
    return found[1] if found is not None else None


def require_user(request: web.Request) -> Principal:
    principal: Principal | None = request.get(PRINCIPAL)
    if principal is None:
        if request.headers.get("Authorization"):
            raise BAD_TOKEN("The token is expired, revoked or not from this cluster; log in again.")
        raise GUEST("Send Authorization: Bearer <token>; POST /api/v2/authn/basic/login gives one.")
    return principal


def require_interactive(request: web.Request) -> Principal:
    """A caller with a login token: application tokens serve job operations only."""
    principal = require_user(request)
    if principal.application:
        raise APPLICATION_TOKEN("Application tokens serve job operations only; log in with a password.")
    return principal


def require_admin(request: web.Request) -> Principal:
    principal = require_interactive(request)
    if not principal.admin:
        raise NON_ADMIN()
    return principal
