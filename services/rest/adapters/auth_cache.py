"""A brief memory of which caller a token stands for, so most requests run no SQL to know it.

Checking a token reads the tokens table and the user's groups, several statements on the one
SQLite connection that job submissions and the projection also wait for; under a burst of
submissions it was the largest cost of a request. ``CachedTokens`` remembers each successful
check for ``ttl`` seconds at most, never past the token's own expiry (by the platform's clock,
``accounts.now_ms``, the one the tokens table is compared with).

What keeps it exact on this instance: every write this service makes through its engine to a
table outside the job read model (users, groups, tokens, anything new) forgets every answer, once
when the statement runs and again when its connection returns to the pool (after the commit),
and an answer computed while such a write was under way is not kept. So a logout, a revoked
token or a change of groups applies at once here; another instance of the service sees it
within ``ttl`` seconds. Failed checks are not remembered (a bad token costs no SQL anyway).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import jwt
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from services.rest.adapters import accounts
from services.rest.adapters.auth import Principal, Tokens

# Tables the projection and submissions write all the time; writes to them change no caller.
READ_MODEL_TABLES = frozenset({"jobs", "job_attempts", "task_attempts", "applied_events"})
_READ_MODEL_WRITE = re.compile(r'\s*(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+"?(\w+)', re.IGNORECASE)
_READ_ONLY = re.compile(r"\s*(?:SELECT|PRAGMA)\b", re.IGNORECASE)
_DIRTY = "pai_accounts_written"
# Beyond this many remembered tokens the memory starts afresh (a bound, not an expected size).
MAX_ENTRIES = 10_000


def changes_accounts(statement: str) -> bool:
    """Whether a statement may change who a token stands for: anything but reads and read-model writes."""
    if _READ_ONLY.match(statement):
        return False
    write = _READ_MODEL_WRITE.match(statement)
    return not (write and write.group(1).lower() in READ_MODEL_TABLES)


class AccountWrites:
    """A counter that moves whenever the engine writes, or finishes writing, outside the read model."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.generation = 0
        # SQLAlchemy runs these on the event loop's thread (in its greenlet), so no lock is needed.
        event.listen(engine.sync_engine, "after_cursor_execute", self._after_execute)
        event.listen(engine.sync_engine, "checkin", self._checkin)

    def _after_execute(self, conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if changes_accounts(statement):
            conn.info[_DIRTY] = True
            self.generation += 1

    def _checkin(self, _dbapi_connection: Any, record: Any) -> None:
        if record.info.pop(_DIRTY, False):
            self.generation += 1


@dataclass
class _Entry:
    principal: Principal
    until: float
    generation: int
    expires_ms: float | None = None  # the token's exp, by the platform's clock


@dataclass(frozen=True)
class CachedTokens(Tokens):
    """``Tokens`` whose successful checks are remembered briefly (see the module's docstring)."""

    ttl: float = 1.0
    writes: AccountWrites | None = None
    entries: dict[tuple[str, str | None], _Entry] | None = None
    # Checks read through this one (see create_read_engine); tokens are issued through ``engine``.
    reader: Tokens | None = None

    @classmethod
    def over(
        cls, engine: AsyncEngine, secret: str, ttl: float, *, reader: AsyncEngine | None = None
    ) -> CachedTokens:
        checker = Tokens(engine=reader, secret=secret) if reader is not None else None
        return cls(
            engine=engine, secret=secret, ttl=ttl, writes=AccountWrites(engine), entries={}, reader=checker
        )

    async def _check(self, token: str, username: str | None) -> Principal | None:
        if self.reader is not None:
            return await self.reader.check(token, username)
        return await super().check(token, username)

    async def check(self, token: str, username: str | None = None) -> Principal | None:
        if self.writes is None or self.entries is None or self.ttl <= 0:
            return await self._check(token, username)
        key = (token, username)
        now = time.monotonic()
        entry = self.entries.get(key)
        if (
            entry is not None
            and entry.until > now
            and entry.generation == self.writes.generation
            and (entry.expires_ms is None or entry.expires_ms > accounts.now_ms())
        ):
            return entry.principal
        generation = self.writes.generation
        principal = await self._check(token, username)
        if principal is None or generation != self.writes.generation:
            self.entries.pop(key, None)
            return principal
        life = self.ttl
        expires = jwt.decode(token, options={"verify_signature": False}).get("exp")
        expires_ms = float(expires) * 1000 if isinstance(expires, int | float) else None
        if expires_ms is not None:
            life = min(life, (expires_ms - accounts.now_ms()) / 1000)
        if life > 0:
            if len(self.entries) >= MAX_ENTRIES:
                self.entries.clear()
            self.entries[key] = _Entry(principal, time.monotonic() + life, generation, expires_ms)
        return principal
