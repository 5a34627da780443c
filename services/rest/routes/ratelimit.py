"""Request rate limits as OpenPAI's rest-server applies them, so one client cannot starve the rest.

Three limits, each counted in a fixed window by the ``limits`` library: every request per
client address (600 a minute), the job list per user (60 a minute) and job submissions per
user (60 an hour); a figure of 0 turns that limit off. The counts live in the storage named by
``PAI_RATE_LIMIT_STORAGE_URI``: this process's memory by default (each replica counts on its
own), or Redis (``async+redis://host:6379``) so that several replicas share one count.

The address limit runs before the token check, so a flood costs no database work; the per-user
limits run after it, because they need the user (a request without one is left to the route's
401). A refused request gets 429 in OpenPAI's ``{code, message}`` shape naming the limit, its
figure and when to retry, with ``Retry-After``; every answer carries the ``RateLimit-*`` fields
of the narrowest limit that counted it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware
from limits import RateLimitItem, RateLimitItemPerSecond
from limits.aio.storage import Storage
from limits.aio.strategies import FixedWindowRateLimiter
from limits.util import WindowStats

from services.rest.adapters.auth import PRINCIPAL
from services.rest.core.errors import TOO_MANY_REQUESTS
from services.rest.settings import RestSettings, rate_limit_storage

log = structlog.get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Set by the inner (per-user) limit so the outer (per-address) one leaves its fields alone.
COUNTED = web.RequestKey("rate_limit_counted", bool)


def _per(seconds: int) -> str:
    named = {1: "second", 60: "minute", 3600: "hour", 86400: "day"}
    return f"per {named[seconds]}" if seconds in named else f"per {seconds} s"


@dataclass(frozen=True)
class Limit:
    """One configured limit: what it counts, its figure and window, the setting that sets it."""

    name: str
    counts: str
    amount: int
    window_seconds: int
    setting: str

    @property
    def item(self) -> RateLimitItem:
        return RateLimitItemPerSecond(self.amount, self.window_seconds, namespace="pai")

    def described(self) -> str:
        return f"{self.amount} {_per(self.window_seconds)} ({self.setting})"


def configured_limits(settings: RestSettings) -> tuple[Limit, Limit, Limit]:
    """The API, job-list and submission limits in force (amount 0: off)."""
    return (
        Limit(
            "api",
            "requests from address",
            settings.rate_limit_api_per_min,
            settings.rate_limit_api_window_seconds,
            "PAI_RATE_LIMIT_API_PER_MIN",
        ),
        Limit(
            "list-jobs",
            "job list requests by user",
            settings.rate_limit_list_job_per_min,
            settings.rate_limit_list_job_window_seconds,
            "PAI_RATE_LIMIT_LIST_JOB_PER_MIN",
        ),
        Limit(
            "submit-job",
            "job submissions by user",
            settings.rate_limit_submit_job_per_hour,
            settings.rate_limit_submit_job_window_seconds,
            "PAI_RATE_LIMIT_SUBMIT_JOB_PER_HOUR",
        ),
    )


def client_address(request: web.Request, trusted_proxies: int) -> str:
    """The caller's address: the peer, or with N trusted proxies the Nth X-Forwarded-For hop back.

    Only hops added by trusted proxies are believed; a client can prepend anything it likes.
    """
    peer = request.remote or "unknown"
    if trusted_proxies <= 0:
        return peer
    forwarded = [
        hop.strip() for value in request.headers.getall("X-Forwarded-For", ()) for hop in value.split(",")
    ]
    chain = [hop for hop in forwarded if hop] + [peer]
    return chain[max(0, len(chain) - 1 - trusted_proxies)]


def _fields(limit: Limit, stats: WindowStats, now: float) -> dict[str, str]:
    reset = max(1, math.ceil(stats.reset_time - now))
    return {
        "RateLimit-Policy": f"{limit.amount};w={limit.window_seconds}",
        "RateLimit-Limit": str(limit.amount),
        "RateLimit-Remaining": str(max(0, stats.remaining)),
        "RateLimit-Reset": str(reset),
    }


class RateLimits:
    """The three limits over one storage, applied by the two middlewares of ``middlewares``."""

    def __init__(self, settings: RestSettings, prefixes: tuple[str, ...], storage: Storage) -> None:
        self.api, self.list_jobs, self.submit_job = configured_limits(settings)
        self.trusted_proxies = settings.rate_limit_trusted_proxies
        self.jobs_paths = frozenset(prefix + "/v2/jobs" for prefix in prefixes)
        self.limiter = FixedWindowRateLimiter(storage)

    async def count(self, limit: Limit, who: str) -> tuple[bool, dict[str, str]]:
        """Count one request against ``limit`` for ``who``: (allowed, RateLimit fields)."""
        item = limit.item
        try:
            allowed = await self.limiter.hit(item, limit.name, who)
            stats = await self.limiter.get_window_stats(item, limit.name, who)
        except Exception as err:  # a shared storage that is down must not take the API with it
            log.warning("rate-limit storage failed; request let through", limit=limit.name, error=str(err))
            return True, {}
        return allowed, _fields(limit, stats, time.time())

    def user_limit(self, request: web.Request) -> Limit | None:
        if request.path not in self.jobs_paths:
            return None
        if request.method == "GET":
            return self.list_jobs
        if request.method != "POST":
            return None
        # A dry run (?dryRun=true) submits nothing: only the API's limit counts it.
        return None if request.query.get("dryRun", "").lower() == "true" else self.submit_job


def refusal(limit: Limit, who: str, fields: dict[str, str]) -> web.Response:
    retry = fields["RateLimit-Reset"]
    hint = f"Too many {limit.counts} {who}: the limit is {limit.described()}. Retry in {retry} s."
    refused = TOO_MANY_REQUESTS(hint)
    response = web.json_response(refused.body(), status=refused.status)
    response.headers.update(fields)
    response.headers["Retry-After"] = retry
    return response


async def _apply(
    limits: RateLimits, limit: Limit, who: str, request: web.Request, handler: Handler
) -> web.StreamResponse:
    allowed, fields = await limits.count(limit, who)
    if not allowed:
        request[COUNTED] = True
        return refusal(limit, who, fields)
    response = await handler(request)
    if not request.get(COUNTED) and not response.prepared:
        response.headers.update(fields)
    request[COUNTED] = True
    return response


def middlewares(settings: RestSettings, prefixes: tuple[str, ...]) -> tuple[Middleware, Middleware]:
    """(per address, per user): the first goes before authentication, the second after it."""
    limits = RateLimits(settings, prefixes, rate_limit_storage(settings.rate_limit_storage_uri))

    @web.middleware
    async def by_address(request: web.Request, handler: Handler) -> web.StreamResponse:
        if limits.api.amount <= 0:
            return await handler(request)
        return await _apply(
            limits, limits.api, client_address(request, limits.trusted_proxies), request, handler
        )

    @web.middleware
    async def by_user(request: web.Request, handler: Handler) -> web.StreamResponse:
        limit = limits.user_limit(request)
        principal = request.get(PRINCIPAL)
        if limit is None or limit.amount <= 0 or principal is None:
            return await handler(request)
        return await _apply(limits, limit, principal.username, request, handler)

    return by_address, by_user
