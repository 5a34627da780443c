"""One active instance of a service: a lease in the PAI_LEASES KV bucket, renewed well inside its TTL.

A standby polls until the key is gone (deleted on a clean stop, or expired by the bucket's TTL
after a crash), then creates it. An instance restarted under the same identity (the same
replica slot) takes its own lease back at once. Losing the lease stops the service: an instance
that might not be the only one must not act.

Every acquisition has an epoch: the KV revision the acquiring write got. Revisions of a bucket
only grow, so a later holder always has a larger epoch than any earlier one, whoever they were;
the scheduler stamps its decisions with it (libs/backbone/fencing.py).

`lead` runs a service that leads once and stops with its lease (the scheduler, the
orchestrator); `while_leading` runs a turn of work whenever the lease is this instance's and
stands by again after a loss (REST's projection, the monitor's cluster view, the alerter).
`Lease.confirm` renews on demand: an action that must not be taken by two instances (an alert
notified) is taken after it, while no other instance can hold the lease for a TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog
from nats.errors import Error as NatsError
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

log = structlog.get_logger(__name__)

# The bucket's TTL (libs/backbone/topology.py LEASES) is three renewals: a leader that cannot
# reach the bus for two renewals in a row still holds it.
RENEW_EVERY = 2.0
# How often a standby looks whether the lease is free again.
STANDBY_POLL = 0.5


class LeaseLost(Exception):
    """Another instance holds the lease now."""


class Lease:
    def __init__(
        self,
        kv: KeyValue,
        key: str,
        holder: str,
        *,
        renew_every: float = RENEW_EVERY,
        poll: float = STANDBY_POLL,
    ) -> None:
        self.kv = kv
        self.key = key
        self.holder = holder
        self.revision: int | None = None
        # The revision of the write that acquired the lease; None until acquired.
        self.epoch: int | None = None
        self.renew_every = renew_every
        self.poll = poll
        # One renewal at a time: two updates from one revision would fail each other as a takeover.
        self._renewing = asyncio.Lock()

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until this instance holds the lease; False if `stop` was set first."""
        announced = False
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
                    if not announced:
                        log.info(
                            "standing by; another instance holds the lease",
                            key=self.key,
                            holder=entry.value.decode(),
                        )
                        announced = True
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), self.poll)
                    continue
            except (NatsError, TimeoutError) as exc:  # a race (APIError), or the bus is away
                log.info("lease race; looking again", key=self.key, error=str(exc) or type(exc).__name__)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.2)
                continue
            self.epoch = self.revision
            log.info("lease acquired", key=self.key, holder=self.holder, epoch=self.epoch)
            return True
        return False

    async def confirm(self) -> None:
        """Renew now: once this returns, no other instance can hold the lease for the bucket's TTL.

        Raises LeaseLost if another instance holds it (or it expired); the bus's own errors
        (NatsError, TimeoutError) as they come: then nothing is confirmed.
        """
        async with self._renewing:
            try:
                self.revision = await self.kv.update(self.key, self.holder.encode(), last=self.revision)
            except KeyWrongLastSequenceError as exc:
                raise LeaseLost(f"the lease {self.key!r} was taken over") from exc

    async def keep(self, stop: asyncio.Event) -> None:
        """Renew until `stop`; raise LeaseLost if someone else took it."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.renew_every)
            if stop.is_set():
                break
            try:
                await self.confirm()
            except (NatsError, TimeoutError) as exc:
                # The bus is away for now: renew at the next turn; if the TTL passes meanwhile the
                # key is gone and the update above fails as a takeover.
                log.warning(
                    "lease not renewed; trying again", key=self.key, error=str(exc) or type(exc).__name__
                )

    async def release(self) -> None:
        with contextlib.suppress(Exception):
            await self.kv.delete(self.key, last=self.revision)


async def lead(
    lease: Lease, stop: asyncio.Event, on_lost: Callable[[LeaseLost], None] | None = None
) -> asyncio.Task[None] | None:
    """Acquire `lease` (waiting as a standby), then keep it in a task that sets `stop` if it is lost.

    Returns the keeping task (await it after `stop` to release), or None if `stop` came first.
    """
    if not await lease.acquire(stop):
        return None

    async def keeping() -> None:
        try:
            await lease.keep(stop)
        except LeaseLost as lost:
            log.warning("lease lost; stopping", key=lease.key, error=str(lost))
            if on_lost is not None:
                on_lost(lost)
            stop.set()
            return
        await lease.release()

    return asyncio.create_task(keeping(), name=f"lease-{lease.key}")


async def while_leading(
    kv: KeyValue,
    key: str,
    holder: str,
    work: Callable[[asyncio.Event, Lease], Awaitable[None]],
    stop: asyncio.Event,
    *,
    renew_every: float = RENEW_EVERY,
    poll: float = STANDBY_POLL,
) -> None:
    """Run `work(turn, lease)` whenever `holder` holds the lease `key`, until `stop`.

    A standby waits for the lease; a turn ends when `work` returns or the lease is lost (`turn`
    is set: `work` must return soon after), and the instance stands by again.
    """
    while not stop.is_set():
        turn = asyncio.Event()
        follower = asyncio.create_task(_follow(stop, turn))
        try:
            lease = Lease(kv, key, holder, renew_every=renew_every, poll=poll)
            leading = await lead(lease, turn)
            if leading is None:
                return
            try:
                await work(turn, lease)
            finally:
                turn.set()
                await leading
        finally:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)


async def _follow(stop: asyncio.Event, turn: asyncio.Event) -> None:
    await stop.wait()
    turn.set()
