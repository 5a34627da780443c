"""The lease in KV: a renewal whose answer was lost is not a takeover; a takeover is."""

from __future__ import annotations

import asyncio

import pytest
from nats.js.errors import KeyNotFoundError

from libs.backbone.connecting import Bus
from libs.backbone.leasing import Lease, LeaseLost
from libs.backbone.topology import LEASES, ensure_topology


async def acquired(bus: Bus, holder: str) -> Lease:
    await ensure_topology(bus.js)
    lease = Lease(await bus.js.key_value(LEASES.bucket), "service", holder)
    assert await lease.acquire(asyncio.Event())
    return lease


async def test_a_renewal_stored_without_its_answer_is_not_taken_for_a_takeover(bus: Bus) -> None:
    lease = await acquired(bus, "service-0")
    epoch = lease.epoch
    kv = await bus.js.key_value(LEASES.bucket)
    # A renewal the server stored while its answer was lost (a NATS server going away): the
    # lease's revision is one behind the key's.
    stored = await kv.update("service", b"service-0", last=lease.revision)
    await lease.confirm()
    assert lease.revision is not None
    assert lease.revision > stored
    assert lease.epoch == epoch  # the same tenure: decisions keep their epoch


async def test_a_lease_another_instance_holds_is_lost(bus: Bus) -> None:
    lease = await acquired(bus, "service-0")
    kv = await bus.js.key_value(LEASES.bucket)
    await kv.delete("service")
    await kv.create("service", b"service-1")
    with pytest.raises(LeaseLost):
        await lease.confirm()


async def test_an_expired_or_released_lease_is_lost(bus: Bus) -> None:
    lease = await acquired(bus, "service-0")
    kv = await bus.js.key_value(LEASES.bucket)
    await kv.delete("service")
    with pytest.raises(LeaseLost):
        await lease.confirm()


class Unanswered:
    """A bucket whose writes get no answer after the lease was taken (the bus away)."""

    def __init__(self) -> None:
        self.writes = 0

    async def get(self, key: str) -> None:
        raise KeyNotFoundError

    async def create(self, key: str, value: bytes) -> int:
        self.writes += 1
        return 1

    async def update(self, key: str, value: bytes, last: int | None = None) -> int:
        self.writes += 1
        await asyncio.Event().wait()  # never answered
        raise AssertionError("unreachable")


async def test_a_leader_that_cannot_renew_lets_go_before_the_key_can_expire() -> None:
    bucket = Unanswered()
    lease = Lease(bucket, "service", "service-0", renew_every=0.2, ttl=1.0)  # type: ignore[arg-type]
    assert await lease.acquire(asyncio.Event())
    started = asyncio.get_running_loop().time()
    with pytest.raises(LeaseLost, match="not renewed"):
        await asyncio.wait_for(lease.keep(asyncio.Event()), 10)
    # Let go within the TTL of its last write, after trying again meanwhile.
    assert asyncio.get_running_loop().time() - started < 1.0
    assert bucket.writes >= 2
