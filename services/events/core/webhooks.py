"""Webhook subscriptions: what they are, which URLs they may name, how they are signed and retried.

Pure: the address check (``TargetPolicy``) takes addresses already resolved, normalised first
(IPv4-mapped and -compatible IPv6, unspecified addresses, decimal and octal IPv4 hosts, a
rooted name's trailing dot; ``localhost`` names are loopback whatever a resolver says), the
backoff takes the attempt number, the signature is HMAC-SHA256 over the exact body sent
(``X-PAI-Signature-256``, ``sha256=<hex>``, the form GitHub's webhooks use, so receivers' checks fit).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
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
    # The receiver's address was refused by the target policy (nothing was sent).
    refused: bool = False
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


def refused_address(addresses: Iterable[str], port: int, policy: TargetPolicy) -> str | None:
    """Why the first refused address is refused, or None when every one may be reached."""
    for address in addresses:
        ip = literal_address(address)
        reason = policy.refusal(ip, port) if ip is not None else None
        if reason is not None:
            return reason
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


# Receivers: which addresses a webhook may reach ---------------------------------------------

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_LOOPBACK_V4 = ipaddress.IPv4Address("127.0.0.1")


def literal_address(host: str) -> IPAddress | None:
    """The address a host names literally, in every form a resolver accepts, else None.

    IPv6 literals (with or without brackets and zone) and IPv4 in the forms of ``inet_aton``:
    dotted quads, fewer parts (``127.1``), decimal (``2130706433``), octal (``0177.0.0.1``) and
    hex (``0x7f.1``) parts, each also with the trailing dot of a rooted name (``127.0.0.1.``),
    which URL parsers keep and clients connect through. A name (anything else) is None: the
    resolver answers for it.
    """
    text = host.strip().strip("[]").split("%", 1)[0].removesuffix(".")
    if ":" in text:
        try:
            return ipaddress.IPv6Address(text)
        except ValueError:
            return None
    parts = text.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    numbers: list[int] = []
    for part in parts:
        try:
            if part.lower().startswith("0x"):
                numbers.append(int(part[2:], 16))
            elif len(part) > 1 and part.startswith("0"):
                numbers.append(int(part, 8))
            else:
                numbers.append(int(part, 10) if part.isdigit() else -1)
        except ValueError:
            return None
    if any(n < 0 for n in numbers):
        return None
    *leading, last = numbers
    if any(n > 255 for n in leading) or last >= 256 ** (5 - len(numbers)):
        return None
    value = last
    for index, number in enumerate(leading):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


LOOPBACK_ADDRESSES = (_LOOPBACK_V4, ipaddress.IPv6Address("::1"))


def loopback_name(host: str) -> bool:
    """Whether ``host`` is ``localhost`` or a name under it, with or without the trailing dot
    (``localhost.``): loopback by RFC 6761 whatever a resolver says. Most resolvers answer so, but
    one that does not (no ``localhost.`` in /etc/hosts) would let such a URL through creation."""
    name = host.strip().lower().removesuffix(".")
    return name == "localhost" or name.endswith(".localhost")


def normalised(address: IPAddress) -> IPAddress:
    """The address a connection to ``address`` reaches: IPv4-mapped (``::ffff:a.b.c.d``) and
    IPv4-compatible (``::a.b.c.d``) IPv6 as the IPv4 address, and the unspecified addresses
    (``0.0.0.0``, ``::``, which reach this machine) as loopback."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        elif address.packed[:12] == bytes(12) and int(address) > 1:
            address = ipaddress.IPv4Address(address.packed[12:])
        elif address.is_unspecified:
            return ipaddress.IPv6Address("::1")
    if isinstance(address, ipaddress.IPv4Address) and address in ipaddress.IPv4Network("0.0.0.0/8"):
        return _LOOPBACK_V4
    return address


@dataclass(frozen=True)
class TargetPolicy:
    """Where receivers may not be: forbidden ranges (unless the admin allows them), and this
    platform's own listening ports on any address of this machine."""

    forbidden: tuple[IPNetwork, ...] = ()
    allowed: tuple[IPNetwork, ...] = ()
    own_ports: frozenset[int] = frozenset()
    own_addresses: frozenset[IPAddress] = frozenset()

    def refusal(self, address: IPAddress, port: int) -> str | None:
        """Why a receiver at ``address``:``port`` is refused (naming the rule), or None."""
        ip = normalised(address)
        if port in self.own_ports and (ip.is_loopback or ip in self.own_addresses):
            return (
                f"{ip} port {port} is one of this platform's own ports (its API, portal, metrics "
                "or NATS; rule PAI_WEBHOOK_FORBIDDEN_PORTS)"
            )
        if any(ip in network for network in self.allowed):
            return None
        for network in self.forbidden:
            if ip.version == network.version and ip in network:
                return (
                    f"{ip} is in {network}, a range webhooks may not reach "
                    "(rule PAI_WEBHOOK_FORBIDDEN_NETWORKS)"
                )
        return None


def parse_ports(text: str) -> frozenset[int]:
    """Comma-separated port numbers, as the platform passes its own."""
    return frozenset(int(part) for part in text.split(",") if part.strip())


def url_port(url: str) -> int:
    parts = urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def client_error_verdict(policy: str, attempt: int, attempts: int) -> str:
    """What to do after a 4xx answer (other than 408/429): ``retry``, ``fail`` or ``drop``.

    ``retry`` (the default policy) retries it up to ``attempts`` attempts, then fails the
    subscription; ``fail`` fails it at once; ``drop`` records the answer and goes on.
    """
    if policy == "drop":
        return "drop"
    if policy == "fail" or attempt >= attempts:
        return "fail"
    return "retry"
