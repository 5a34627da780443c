"""One active scheduler: a lease in the PAI_LEASES KV bucket, renewed well inside its TTL.

A standby waits until the key is gone (deleted on a clean stop, or expired by the bucket's
TTL after a crash). An instance restarted under the same identity (the same replica slot)
takes its own lease back at once. Losing the lease stops the service: a scheduler that might
not be the only one must not place anything.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog
from nats.js.errors import APIError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

log = structlog.get_logger(__name__)

RENEW_EVERY = 4.0


class LeaseLost(Exception):
    """Another instance holds the lease now."""


class Lease:
    def __init__(self, kv: KeyValue, key: str, holder: str) -> None:
        self.kv = kv
        self.key = key
        self.holder = holder
        self.revision: int | None = None

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until this instance holds the lease; False if `stop` was set first."""
        while not stop.is_set():
            try:
                entry = await self.kv.get(self.key)
            except KeyNotFoundError:
                entry = None
            try:
                if entry is None or entry.value is None:
                    self.revision = await self.kv.create(self.key, self.holder.encode())
                elif entry.value.decode() == self.holder:
                    self.revision = await self.kv.update(self.key, self.holder.encode(), last=entry.revision)
                else:
                    log.info("standing by; another scheduler holds the lease", holder=entry.value.decode())
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), RENEW_EVERY)
                    continue
            except APIError as exc:  # raced with another instance, or the key expired meanwhile
                log.info("lease race; looking again", error=str(exc))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.2)
                continue
            log.info("lease acquired", holder=self.holder)
            return True
        return False

    async def keep(self, stop: asyncio.Event) -> None:
        """Renew until `stop`; raise LeaseLost if someone else took it."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), RENEW_EVERY)
            if stop.is_set():
                break
            try:
                self.revision = await self.kv.update(self.key, self.holder.encode(), last=self.revision)
            except KeyWrongLastSequenceError as exc:
                raise LeaseLost(f"the scheduler lease {self.key!r} was taken over") from exc

    async def release(self) -> None:
        with contextlib.suppress(Exception):
            await self.kv.delete(self.key, last=self.revision)
