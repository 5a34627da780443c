"""ModelStore keeps typed values in KV and refuses writes based on a stale revision."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import pytest
from pydantic import BaseModel

from libs.backbone.connecting import Bus
from libs.backbone.errors import KVConflictError
from libs.backbone.kv import Change, ModelStore
from libs.backbone.provisioning import KVSpec, ensure_kv


class Lease(BaseModel):
    holder: str
    term: int


async def store(bus: Bus) -> ModelStore[Lease]:
    await ensure_kv(bus.js, KVSpec(bucket="leases"))
    return await ModelStore.open(bus.js, "leases", Lease)


async def test_a_value_reads_back_with_its_revision(bus: Bus) -> None:
    leases = await store(bus)
    assert await leases.get("scheduler") is None
    revision = await leases.put("scheduler", Lease(holder="a", term=1))
    current = await leases.get("scheduler")
    assert current is not None
    assert current.value == Lease(holder="a", term=1)
    assert current.revision == revision


async def test_an_update_from_a_stale_revision_is_a_conflict(bus: Bus) -> None:
    leases = await store(bus)
    first = await leases.create("scheduler", Lease(holder="a", term=1))
    second = await leases.update("scheduler", Lease(holder="b", term=2), last_revision=first)
    with pytest.raises(KVConflictError) as caught:
        await leases.update("scheduler", Lease(holder="c", term=2), last_revision=first)
    assert caught.value.expected_revision == first
    current = await leases.get("scheduler")
    assert current is not None
    assert current.value.holder == "b"
    assert current.revision == second


async def test_create_refuses_an_existing_key_and_create_if_absent_returns_it(bus: Bus) -> None:
    leases = await store(bus)
    await leases.create("scheduler", Lease(holder="a", term=1))
    with pytest.raises(KVConflictError):
        await leases.create("scheduler", Lease(holder="b", term=1))
    winner = await leases.create_if_absent("scheduler", Lease(holder="b", term=1))
    assert winner.value.holder == "a"
    fresh = await leases.create_if_absent("monitor", Lease(holder="m", term=1))
    assert fresh.value.holder == "m"
    assert sorted(await leases.keys()) == ["monitor", "scheduler"]


async def test_a_deleted_key_reads_as_absent_and_can_be_created_again(bus: Bus) -> None:
    leases = await store(bus)
    revision = await leases.create("scheduler", Lease(holder="a", term=1))
    await leases.delete("scheduler", last_revision=revision)
    assert await leases.get("scheduler") is None
    await leases.create("scheduler", Lease(holder="b", term=2))
    current = await leases.get("scheduler")
    assert current is not None
    assert current.value.holder == "b"


async def test_a_watch_sees_current_values_then_changes_and_deletes(bus: Bus) -> None:
    leases = await store(bus)
    await leases.put("scheduler", Lease(holder="a", term=1))
    changes: asyncio.Queue[Change[Lease]] = asyncio.Queue()

    async def watch() -> None:
        async with aclosing(leases.watch()) as stream:
            async for change in stream:
                await changes.put(change)

    watcher = asyncio.create_task(watch())
    first = await asyncio.wait_for(changes.get(), 10)
    assert (first.key, first.value) == ("scheduler", Lease(holder="a", term=1))
    await leases.put("scheduler", Lease(holder="b", term=2))
    second = await asyncio.wait_for(changes.get(), 10)
    assert second.value == Lease(holder="b", term=2)
    await leases.delete("scheduler")
    third = await asyncio.wait_for(changes.get(), 10)
    assert (third.key, third.value) == ("scheduler", None)
    watcher.cancel()
    await asyncio.gather(watcher, return_exceptions=True)
