"""Sessions and CSRF: the API token lives only in a sealed, HttpOnly cookie.

The session cookie is the login token and who it belongs to, encrypted and authenticated with
Fernet (AES-CBC + HMAC) under the portal's key: page scripts cannot read it (HttpOnly), another
site cannot read it or forge it, and replicas sharing the key share sessions. Every write needs
the CSRF token, an HMAC of the cookie that same-origin scripts fetch from /portal/session and send
back in a header; another site can make the browser send the cookie but cannot learn the token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass

from cryptography.fernet import Fernet, InvalidToken

COOKIE = "pai_session"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

# No inline script or style, nothing from another origin, no framing.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "font-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)

SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
}


@dataclass(frozen=True)
class Session:
    token: str
    user: str
    admin: bool
    expires: int  # unix seconds


def new_key() -> bytes:
    return Fernet.generate_key()


def as_key(material: bytes) -> bytes:
    """A Fernet key from a file's bytes: the key itself, or one derived from any other secret."""
    try:
        Fernet(material)
    except ValueError:
        return base64.urlsafe_b64encode(hashlib.sha256(b"pai-portal-session\0" + material).digest())
    return material


class Sealer:
    """Seals sessions into cookie values and opens them; derives each session's CSRF token."""

    def __init__(self, key: bytes) -> None:
        self._fernet = Fernet(key)
        self._mac_key = hashlib.sha256(b"pai-portal-csrf" + key).digest()

    def seal(self, session: Session) -> str:
        body = {"t": session.token, "u": session.user, "a": session.admin, "e": session.expires}
        return self._fernet.encrypt(json.dumps(body).encode()).decode()

    def open(self, value: str, now: int) -> Session | None:
        """The session in a cookie value, or None when it is forged, damaged or expired."""
        if not value:
            return None
        try:
            body = json.loads(self._fernet.decrypt(value.encode()))
            session = Session(str(body["t"]), str(body["u"]), bool(body["a"]), int(body["e"]))
        except (InvalidToken, ValueError, KeyError, TypeError):
            return None
        return session if session.expires > now else None

    def csrf_token(self, cookie_value: str) -> str:
        return hmac.new(self._mac_key, cookie_value.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, cookie_value: str, presented: str | None) -> bool:
        return bool(presented) and hmac.compare_digest(self.csrf_token(cookie_value), presented or "")


def random_secret() -> str:
    return secrets.token_urlsafe(32)


def same_origin(origin: str | None, host: str | None, scheme: str) -> bool:
    """Whether a write's Origin header (when the browser sent one) is this portal's own."""
    if not origin:
        return True  # not a browser's cross-site request: the CSRF token still decides
    return bool(host) and origin in (f"{scheme}://{host}", f"http://{host}", f"https://{host}")
