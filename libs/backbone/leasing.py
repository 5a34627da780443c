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
from typing import TypeVar

import structlog
from nats.errors import Error as NatsError
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from libs.backbone.errors import TRANSIENT_ERRORS

log = structlog.get_logger(__name__)

T = TypeVar("T")

# The bucket's TTL (libs/backbone/topology.py LEASES) is three renewals: a leader that cannot
# reach the bus for two renewals in a row still holds it.
RENEW_EVERY = 2.0
# How often a standby looks whether the lease is free again.
STANDBY_POLL = 0.5
# The bucket's TTL: how long the key outlives the last renewal.
TTL = 3 * RENEW_EVERY
# How long a request about the lease waits for its answer: one to a NATS server that went away,
# or to a group electing its leader, is made again (to the server the client has moved to)
# rather than waited on for the bus's whole timeout.
REQUEST_TIMEOUT = 1.5


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
        ttl: float = TTL,
    ) -> None:
        self.kv = kv
        self.key = key
        self.holder = holder
        self.revision: int | None = None
        # The revision of the write that acquired the lease; None until acquired.
        self.epoch: int | None = None
        self.renew_every = renew_every
        self.poll = poll
        # A leader that could not renew for this long stops leading, before the key can expire
        # (the TTL runs from a write no earlier than the request that made it, `renewed_at`):
        # by the time another instance may take the lease, this one has let go.
        self.hold = ttl - min(1.0, renew_every / 2)
        self.renewed_at = 0.0
        # One renewal at a time: two updates from one revision would fail each other as a takeover.
        self._renewing = asyncio.Lock()

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until this instance holds the lease; False if `stop` was set first."""
        announced = False
        while not stop.is_set():
            try:
                try:
                    entry = await _answer(self.kv.get(self.key))
                except KeyNotFoundError:
                    entry = None
                started = _now()
                if entry is None or entry.value is None:
                    self.revision = await _answer(self.kv.create(self.key, self.holder.encode()))
                elif entry.value.decode() == self.holder:
                    self.revision = await _answer(
                        self.kv.update(self.key, self.holder.encode(), last=entry.revision)
                    )
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
            self.renewed_at = started
            log.info("lease acquired", key=self.key, holder=self.holder, epoch=self.epoch)
            return True
        return False

    async def confirm(self) -> None:
        """Renew now: once this returns, no other instance can hold the lease for the bucket's TTL.

        Raises LeaseLost if another instance holds it (or it expired); the bus's own errors
        (NatsError, TimeoutError) as they come: then nothing is confirmed.
        """
        async with self._renewing:
            started = _now()
            try:
                self.revision = await _answer(
                    self.kv.update(self.key, self.holder.encode(), last=self.revision)
                )
            except KeyWrongLastSequenceError as exc:
                # Taken over, or an earlier renewal of ours was stored and its answer lost (a
                # NATS server went away meanwhile): the key still naming this instance is the
                # latter, as only this instance writes its name there.
                try:
                    entry = await _answer(self.kv.get(self.key))
                except KeyNotFoundError:
                    entry = None
                if entry is None or entry.value is None or entry.value.decode() != self.holder:
                    raise LeaseLost(f"the lease {self.key!r} was taken over") from exc
                started = _now()
                try:  # renewed from the stored revision, so that the TTL runs from now
                    self.revision = await _answer(
                        self.kv.update(self.key, self.holder.encode(), last=entry.revision)
                    )
                except KeyWrongLastSequenceError as again:
                    raise LeaseLost(f"the lease {self.key!r} was taken over") from again
            self.renewed_at = started

    def left(self) -> float:
        """Seconds this instance still holds the lease for certain (renewed within `hold`, so the
        key cannot have expired and passed to another); 0 before it was acquired."""
        return max(0.0, self.renewed_at + self.hold - _now()) if self.epoch is not None else 0.0

    def held(self) -> bool:
        """Whether this instance holds the lease now for certain: checked by a leader before an
        action that must not be taken twice."""
        return self.left() > 0

    async def keep(self, stop: asyncio.Event) -> None:
        """Renew until `stop`; raise LeaseLost if someone else took it, or if no renewal went
        through for `hold` seconds (the key may expire, and another instance take it)."""
        pause = self.renew_every
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), pause)
            if stop.is_set():
                break
            try:
                left = self.renewed_at + self.hold - _now()
                await asyncio.wait_for(self.confirm(), max(0.0, left))
                pause = self.renew_every
            except (NatsError, TimeoutError) as exc:
                if _now() >= self.renewed_at + self.hold:
                    raise LeaseLost(
                        f"the lease {self.key!r} was not renewed for {self.hold:g} s: letting it go"
                    ) from exc
                # The bus is away for now (a server gone, a group electing): again shortly.
                log.warning(
                    "lease not renewed; trying again", key=self.key, error=str(exc) or type(exc).__name__
                )
                pause = min(self.renew_every, self.poll)

    async def release(self) -> None:
        # Gone already, taken by another, or the bus away: the key expires by itself.
        with contextlib.suppress(*TRANSIENT_ERRORS):
            await self.kv.delete(self.key, last=self.revision)


def _now() -> float:
    return asyncio.get_running_loop().time()


async def _answer(request: Awaitable[T]) -> T:
    """A request about the lease, given REQUEST_TIMEOUT for its answer (TimeoutError)."""
    return await asyncio.wait_for(request, REQUEST_TIMEOUT)


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
