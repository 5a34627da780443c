"""Webhook subscriptions: what they are, which URLs they may name, how they are signed and retried.

Pure: the address check takes addresses already resolved, the backoff takes the attempt
number, the signature is HMAC-SHA256 over the exact body sent (``X-PAI-Signature-256``,
``sha256=<hex>``, the form GitHub's webhooks use, so receivers' existing checks fit).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Iterable
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from services.events.core.filters import Caller, EventFilter, FilterError, parse_filter

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_SECRET = 256
MAX_URL = 2048


class Webhook(BaseModel):
    """One subscription, as stored in the gateway's KV bucket."""

    model_config = ConfigDict(frozen=True)

    id: str
    owner: str
    admin: bool = False
    url: str
    secret: str
    job: str | None = None
    username: str | None = None
    vc: str | None = None
    types: tuple[str, ...] = ()
    created_at: datetime
    # Events after these stream sequences are delivered (what the bus held at creation is not).
    start: dict[str, int] = Field(default_factory=dict)
    failing: bool = False
    failing_since: datetime | None = None
    last_error: str = ""

    @property
    def caller(self) -> Caller:
        return Caller(self.owner, self.admin)

    @property
    def filter(self) -> EventFilter:
        return parse_filter(
            {"job": self.job, "username": self.username, "vc": self.vc, "types": list(self.types)}
        )

    def view(self) -> dict[str, Any]:
        """What the API shows: never the secret."""
        return {
            "id": self.id,
            "owner": self.owner,
            "url": self.url,
            "types": list(self.types),
            "job": self.job,
            "username": self.username,
            "vc": self.vc,
            "createdAt": self.created_at.isoformat(),
            "state": "failing" if self.failing else "active",
            "failingSince": self.failing_since.isoformat() if self.failing_since else None,
            "lastError": self.last_error,
        }


class Attempt(BaseModel):
    """One delivery attempt, kept for ``GET .../deliveries``."""

    model_config = ConfigDict(frozen=True)

    delivery: str  # the event id (X-PAI-Delivery)
    type: str
    stream: str
    sequence: int
    attempt: int
    status: int | None = None
    latency_ms: float = 0.0
    error: str = ""
    ok: bool = False
    at: datetime

    def view(self) -> dict[str, Any]:
        return {
            "delivery": self.delivery,
            "event": self.type,
            "attempt": self.attempt,
            "status": self.status,
            "latencyMs": round(self.latency_ms, 1),
            "error": self.error,
            "ok": self.ok,
            "at": self.at.isoformat(),
        }


class Attempts(BaseModel):
    items: tuple[Attempt, ...] = ()

    def added(self, attempt: Attempt, keep: int) -> Attempts:
        return Attempts(items=(*self.items, attempt)[-keep:])


def parse_networks(text: str) -> tuple[IPNetwork, ...]:
    """Comma-separated CIDRs, as the admin setting lists them."""
    return tuple(ipaddress.ip_network(part.strip(), strict=False) for part in text.split(",") if part.strip())


def forbidden_address(addresses: Iterable[str], networks: tuple[IPNetwork, ...]) -> str | None:
    """The first address inside a forbidden range, or None."""
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if any(ip in network for network in networks):
            return address
    return None


def check_body(body: dict[str, Any]) -> tuple[str, str, EventFilter]:
    """(url, secret, filter) from a POST body; ``FilterError`` names the field and the fix."""
    url = body.get("url")
    if not isinstance(url, str) or not url:
        raise FilterError("url", "url is required: the http(s) address that receives the events.")
    if len(url) > MAX_URL:
        raise FilterError("url", f"url is longer than {MAX_URL} characters.")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise FilterError("url", f"url must start with http:// or https://, got {url[:40]!r}.")
    if not parts.hostname:
        raise FilterError("url", "url names no host.")
    if parts.username is not None or parts.password is not None:
        raise FilterError("url", "url must not carry credentials; the secret signs each delivery instead.")
    secret = body.get("secret")
    if not isinstance(secret, str) or not secret or len(secret) > MAX_SECRET:
        raise FilterError("secret", f"secret is required: a string of 1 to {MAX_SECRET} characters.")
    unknown = sorted(set(body) - {"url", "secret", "types", "job", "username", "vc"})
    if unknown:
        raise FilterError(
            unknown[0], f"{unknown[0]} is not a webhook field (url, secret, types, job, username, vc)."
        )
    return url, secret, parse_filter(body)


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def backoff(attempt: int, first: float, largest: float) -> float:
    """Seconds before retry number ``attempt`` (1 for the first retry): doubling, capped."""
    return float(min(largest, first * 2 ** min(40, max(0, attempt - 1))))


def retryable(status: int | None) -> bool:
    """A failure worth retrying: no answer (timeout, refused), 5xx, 408 or 429."""
    return status is None or status >= 500 or status in (408, 429)
