"""ModelStore keeps typed values in KV and refuses writes based on a stale revision."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import nats.errors
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


class LostAnswer:
    """The bucket's client, with the answer to its next update lost: stored first or not at all."""

    def __init__(self, leases: ModelStore[Lease], *, stored: bool, meanwhile: Lease | None = None) -> None:
        self.kv = leases._kv
        self.stored = stored
        self.meanwhile = meanwhile  # another writer's value, written before the read-back
        self.updates = 0
        self.real_update = self.kv.update

    async def update(self, key: str, value: bytes, last: int | None = None) -> int:
        self.updates += 1
        if self.updates > 1:
            return int(await self.real_update(key, value, last=last))
        if self.stored:
            last = await self.real_update(key, value, last=last)
        if self.meanwhile is not None:
            await self.kv.put(key, self.meanwhile.model_dump_json().encode())
        raise nats.errors.TimeoutError


@pytest.mark.parametrize("stored", [True, False], ids=["stored", "not-stored"])
async def test_an_unanswered_write_is_read_back_and_sent_again_only_if_not_stored(
    bus: Bus, monkeypatch: pytest.MonkeyPatch, stored: bool
) -> None:
    leases = await store(bus)
    first = await leases.create("scheduler", Lease(holder="a", term=1))
    lost = LostAnswer(leases, stored=stored)
    monkeypatch.setattr(leases._kv, "update", lost.update)
    revision = await leases.write("scheduler", Lease(holder="b", term=2), first)
    current = await leases.get("scheduler")
    assert current is not None
    assert (current.value, current.revision) == (Lease(holder="b", term=2), revision)
    assert revision == first + 1  # stored once, whichever request it was
    assert lost.updates == (1 if stored else 2)


async def test_an_unanswered_write_that_another_writer_overtook_is_a_conflict(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    leases = await store(bus)
    first = await leases.create("scheduler", Lease(holder="a", term=1))
    lost = LostAnswer(leases, stored=False, meanwhile=Lease(holder="c", term=3))
    monkeypatch.setattr(leases._kv, "update", lost.update)
    with pytest.raises(KVConflictError):
        await leases.write("scheduler", Lease(holder="b", term=2), first)
    current = await leases.get("scheduler")
    assert current is not None
    assert current.value.holder == "c"
