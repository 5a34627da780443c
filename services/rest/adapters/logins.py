"""Password checks that never stall the API, and a per-account backoff after failed logins.

Argon2 is built to be slow (about 50-300 ms of CPU and 64 MiB per check, by design): run on
REST's event loop, seven bad logins a second took ``GET /api/v2/info`` from 4 ms to a median of
348 ms. So every hash and check runs in a small thread pool (argon2-cffi releases the GIL), at
most ``PASSWORD_WORKERS`` at once; more than ``MAX_WAITING`` waiting sign-ins are refused at once
with 429 rather than queued without bound.

After ``FREE_FAILURES`` failed logins of one account name, each further attempt must wait
``FIRST_DELAY`` seconds, doubling with each failure up to ``MAX_DELAY``; an attempt before its
time is 429 ``TooManyRequestsError`` with ``Retry-After``, and no password is checked. A success
clears the account's count. Names are counted whether or not such a user exists, and an unknown
user's password is checked against a decoy hash: "no such user" and "wrong password" give the same
answer after the same work, so neither the answer nor its time says which names exist.
The counts are per process (like the rate limits' memory storage) and bounded in number.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from services.rest.adapters.auth import hash_password, verify_password
from services.rest.core.errors import TOO_MANY_REQUESTS, ApiError

PASSWORD_WORKERS = 2
MAX_WAITING = 64
FREE_FAILURES = 3
FIRST_DELAY = 1.0
MAX_DELAY = 60.0
# Beyond this many remembered names the oldest are forgotten (a bound on memory, not a size).
MAX_ACCOUNTS = 100_000


def _busy() -> ApiError:
    refused = TOO_MANY_REQUESTS("Too many sign-ins are being checked at once; retry in a second.")
    refused.headers["Retry-After"] = "1"
    return refused


class Passwords:
    """Argon2 off the event loop: hashing and checking in a bounded thread pool."""

    def __init__(self, workers: int = PASSWORD_WORKERS, max_waiting: int = MAX_WAITING) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="argon2")
        self._max_waiting = max_waiting
        self._waiting = 0
        self._decoy: str | None = None

    async def _run(self, fn: object, *args: str | None) -> object:
        if self._waiting >= self._max_waiting:
            raise _busy()
        self._waiting += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)  # type: ignore[arg-type]
        finally:
            self._waiting -= 1

    async def hash(self, password: str) -> str:
        return str(await self._run(hash_password, password))

    async def verify(self, password_hash: str | None, password: str) -> bool:
        """Whether ``password`` matches; a missing hash (no such user) costs a decoy's check."""
        if not password_hash:
            if self._decoy is None:
                self._decoy = await self.hash("decoy password, never anyone's")
            await self._run(verify_password, self._decoy, password)
            return False
        return bool(await self._run(verify_password, password_hash, password))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


@dataclass
class _Record:
    failures: int = 0
    not_before: float = 0.0


@dataclass
class LoginBackoff:
    """Failed logins per account name, and how long the next attempt must wait."""

    free_failures: int = FREE_FAILURES
    first_delay: float = FIRST_DELAY
    max_delay: float = MAX_DELAY
    max_accounts: int = MAX_ACCOUNTS
    _records: OrderedDict[str, _Record] = field(default_factory=OrderedDict)

    def wait_seconds(self, name: str, now: float | None = None) -> float:
        """Seconds before ``name`` may try again (0: now)."""
        record = self._records.get(name)
        if record is None:
            return 0.0
        return max(0.0, record.not_before - (time.monotonic() if now is None else now))

    def failed(self, name: str, now: float | None = None) -> None:
        record = self._records.pop(name, None) or _Record()
        record.failures += 1
        beyond = record.failures - self.free_failures
        if beyond >= 0:
            delay = min(self.max_delay, self.first_delay * 2 ** min(beyond, 30))
            record.not_before = (time.monotonic() if now is None else now) + delay
        self._records[name] = record
        while len(self._records) > self.max_accounts:
            self._records.popitem(last=False)

    def succeeded(self, name: str) -> None:
        self._records.pop(name, None)
