"""Typed state in KV (libs/backbone/kv.py) over an in-memory bucket: an unanswered write read back
and its back-off, a watch's deletes and purges, the "current values are all in" marker after a
silence, and a key watch that breaks and is opened again."""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any

import nats.errors
import nats.js.errors
import pytest
from nats.js.errors import KeyWrongLastSequenceError
from nats.js.kv import KV_DEL, KV_PURGE
from pydantic import BaseModel
from structlog.testing import capture_logs

from libs.backbone import kv
from libs.backbone.errors import KVConflictError
from libs.backbone.kv import Change, KeyWatch, ModelStore, Versioned, current_entries, settled
from tests.support.fake_kv import FakeKV, FakeWatcher, Lost, entry, soon


class Holder(BaseModel):
    name: str
    term: int


A = Holder(name="a", term=1)
B = Holder(name="b", term=2)
C = Holder(name="c", term=3)


def raw(value: Holder) -> bytes:
    return value.model_dump_json().encode()


def store(bucket: FakeKV) -> ModelStore[Holder]:
    return ModelStore(bucket.as_kv(), Holder, "holders")


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The pauses slept (asyncio.sleep, for this test), each made at once."""
    slept: list[float] = []
    real = asyncio.sleep

    async def sleep(delay: float, result: Any = None) -> Any:
        slept.append(delay)
        return await real(0, result)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    return slept


def methods(bucket: FakeKV) -> list[str]:
    return [method for method, *_ in bucket.calls]


# ModelStore.write: an answer lost.


async def test_an_answered_write_returns_its_revision_without_reading_back(pauses: list[float]) -> None:
    bucket = FakeKV()
    holders = store(bucket)
    with capture_logs() as logs:
        first = await soon(holders.write("k", A, None))
        second = await soon(holders.write("k", B, first))
    assert (first, second) == (1, 2)
    assert methods(bucket) == ["create", "update"]
    assert bucket.calls[-1] == ("update", "k", raw(B), 1)
    assert (logs, pauses) == ([], [])


async def test_an_unanswered_write_found_stored_is_not_sent_again_and_says_so(pauses: list[float]) -> None:
    bucket = FakeKV()
    holders = store(bucket)
    bucket.set("k", raw(A))
    error = nats.errors.TimeoutError()
    bucket.script("update", Lost(error))
    with capture_logs() as logs:
        assert await soon(holders.write("k", B, 1)) == 2
    assert methods(bucket) == ["update", "get"]
    assert pauses == [0.2]
    assert logs == [
        {
            "event": "state write unanswered; reading it back",
            "bucket": "holders",
            "key": "k",
            "error": repr(error),
            "log_level": "warning",
        },
        {"event": "unanswered state write was stored", "bucket": "holders", "key": "k", "log_level": "info"},
    ]


async def test_an_unanswered_write_not_stored_is_sent_again_with_the_same_condition(
    pauses: list[float],
) -> None:
    bucket = FakeKV()
    holders = store(bucket)
    bucket.set("k", raw(A))
    bucket.script("update", ConnectionResetError())
    assert await soon(holders.write("k", B, 1)) == 2
    assert methods(bucket) == ["update", "get", "update"]
    assert bucket.calls[-1] == ("update", "k", raw(B), 1)
    assert bucket.value("k") == raw(B)


async def test_an_unanswered_create_not_stored_is_created_again(pauses: list[float]) -> None:
    bucket = FakeKV()
    holders = store(bucket)
    bucket.script("create", nats.errors.NoRespondersError())
    assert await soon(holders.write("k", A, None)) == 1
    assert methods(bucket) == ["create", "get", "create"]


async def test_a_bus_away_is_read_back_after_pauses_doubling_from_a_fifth_to_five_seconds(
    pauses: list[float],
) -> None:
    bucket = FakeKV()
    holders = store(bucket)
    bucket.set("k", raw(A))
    bucket.script("update", Lost(TimeoutError()))
    bucket.script(
        "get",
        TimeoutError(),
        nats.errors.ConnectionClosedError(),
        nats.errors.ConnectionReconnectingError(),
        nats.errors.StaleConnectionError(),
        nats.errors.OutboundBufferLimitError(),
        nats.js.errors.ServiceUnavailableError(),
    )
    assert await soon(holders.write("k", B, 1)) == 2
    assert pauses == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    assert methods(bucket) == ["update"] + ["get"] * 7


async def test_an_unanswered_write_another_writer_overtook_is_a_conflict_at_the_revision_it_wrote_from(
    pauses: list[float],
) -> None:
    for meanwhile in ("another value", "deleted"):
        bucket = FakeKV()
        holders = store(bucket)
        bucket.set("k", raw(A))
        if meanwhile == "deleted":
            bucket.script("update", lambda kv: kv.entries.pop("k") and TimeoutError())
        else:
            bucket.script("update", lambda kv: kv.set("k", raw(C)) and TimeoutError())
        with pytest.raises(KVConflictError) as conflict:
            await soon(holders.write("k", B, 1))
        assert (conflict.value.bucket, conflict.value.key, conflict.value.expected_revision) == (
            "holders",
            "k",
            1,
        )
        assert methods(bucket) == ["update", "get"], meanwhile


async def test_a_resent_write_that_conflicts_or_goes_unanswered_is_read_back_again(
    pauses: list[float],
) -> None:
    bucket = FakeKV()
    holders = store(bucket)
    bucket.set("k", raw(A))

    def earlier_request_lands(fake: FakeKV) -> None:
        fake.set("k", raw(B))  # the first request, stored late

    bucket.script("update", TimeoutError(), TimeoutError(), earlier_request_lands)
    assert await soon(holders.write("k", B, 1)) == 2
    assert methods(bucket) == ["update", "get", "update", "get", "update", "get"]
    assert pauses == [0.2, 0.4, 0.8]
    assert bucket.value("k") == raw(B)


# ModelStore: reads and conditional writes, delete, current, watch.


async def test_a_key_deleted_or_without_a_value_reads_as_absent_and_a_value_reads_with_its_revision() -> None:
    bucket = FakeKV()
    holders = store(bucket)
    assert await soon(holders.get("k")) is None
    bucket.set("k", raw(A))
    bucket.set("j", raw(B))
    assert await soon(holders.get("k")) == Versioned(A, 1)
    assert await soon(holders.get("j")) == Versioned(B, 2)
    bucket.set("k", None)
    assert await soon(holders.get("k")) is None
    await bucket.delete("j")
    assert await soon(holders.get("j")) is None
    bucket.entries["n"] = entry("n", raw(C), None)  # type: ignore[arg-type]
    assert await soon(holders.get("n")) == Versioned(C, 0)


async def test_conditional_writes_name_the_revision_they_expected_when_the_key_moved() -> None:
    bucket = FakeKV()
    holders = store(bucket)
    assert await soon(holders.put("k", A)) == 1
    assert bucket.value("k") == raw(A)
    with pytest.raises(KVConflictError) as exists:
        await soon(holders.create("k", B))
    assert (exists.value.bucket, exists.value.key, exists.value.expected_revision) == ("holders", "k", None)
    assert isinstance(exists.value.__cause__, KeyWrongLastSequenceError)
    assert await soon(holders.create("j", B)) == 2
    with pytest.raises(KVConflictError) as moved:
        await soon(holders.update("k", B, 5))
    assert (moved.value.bucket, moved.value.key, moved.value.expected_revision) == ("holders", "k", 5)
    assert isinstance(moved.value.__cause__, KeyWrongLastSequenceError)
    assert await soon(holders.update("k", B, 1)) == 3
    assert bucket.calls[-1] == ("update", "k", raw(B), 1)


async def test_create_if_absent_returns_what_another_writer_created_first() -> None:
    bucket = FakeKV()
    holders = store(bucket)
    bucket.script("create", lambda kv: kv.set("k", raw(C)) and None)
    assert await soon(holders.create_if_absent("k", A)) == Versioned(C, 1)
    assert await soon(holders.create_if_absent("j", B)) == Versioned(B, 2)
    assert bucket.value("j") == raw(B)


async def test_a_conditional_delete_names_its_revision_and_a_moved_key_is_a_conflict() -> None:
    bucket = FakeKV()
    holders = store(bucket)
    bucket.set("k", raw(A))
    bucket.set("k", raw(B))
    with pytest.raises(KVConflictError) as conflict:
        await soon(holders.delete("k", 1))
    assert (conflict.value.bucket, conflict.value.key, conflict.value.expected_revision) == (
        "holders",
        "k",
        1,
    )
    assert isinstance(conflict.value.__cause__, KeyWrongLastSequenceError)
    await soon(holders.delete("k", 2))
    assert bucket.calls[-1] == ("delete", "k", None, 2)
    assert bucket.value("k") is None
    bucket.set("j", raw(A))
    await soon(holders.delete("j"))
    assert bucket.calls[-1:] == [("delete", "j", None, None)]


async def test_the_current_values_leave_out_deleted_purged_and_empty_keys() -> None:
    bucket = FakeKV()
    values = [
        entry("a", raw(A), 4),
        entry("b", raw(B), 5),
        entry("gone", raw(C), 6),
        entry("gone", None, 7, operation=KV_DEL),
        entry("purged", raw(C), 8),
        entry("purged", None, 9, operation=KV_PURGE),
        entry("empty", b"", 10),
        entry("b", raw(C), 11),
        entry("unnumbered", raw(B), None),  # type: ignore[arg-type]
    ]
    for left, value in enumerate(reversed(values)):
        value.delta = left  # how many more the consumer has to deliver
    watcher = FakeWatcher([*values, None, entry("later", raw(C), 12)])
    bucket.watchers.append(watcher)
    assert await soon(store(bucket).current()) == {
        "a": Versioned(A, 4),
        "b": Versioned(C, 11),
        "unnumbered": Versioned(B, 0),
    }
    assert bucket.watch_calls == [(">", {"meta_only": False})]
    assert watcher.stops == 1


async def test_the_keys_are_read_without_their_values() -> None:
    bucket = FakeKV()
    bucket.watchers.append(FakeWatcher([entry("a", None, 1), entry("b", None, 2, operation=KV_DEL), None]))
    assert await soon(store(bucket).keys()) == ["a"]
    assert bucket.watch_calls == [(">", {"meta_only": True})]
    bucket.watchers.append(FakeWatcher([entry("x.1", raw(A), 3), None]))
    assert list(await current_entries(bucket.as_kv(), "x.>")) == ["x.1"]
    assert bucket.watch_calls[-1] == ("x.>", {"meta_only": False})


async def test_a_watch_yields_values_then_deletes_and_purges_as_nothing() -> None:
    bucket = FakeKV()
    watcher = FakeWatcher(
        [
            entry("a", raw(A), 1),
            None,
            entry("a", None, 2, operation=KV_DEL),
            entry("b", raw(B), 3),
            entry("b", raw(B), 4, operation=KV_PURGE),
            entry("c", None, 5),
            entry("d", raw(C), None),  # type: ignore[arg-type]
            entry("d", None, None, operation=KV_DEL),  # type: ignore[arg-type]
        ],
        ends=False,
    )
    bucket.watchers.append(watcher)
    seen: list[Change[Holder]] = []
    async with aclosing(store(bucket).watch("x.>", include_history=True)) as changes:
        async for change in changes:
            seen.append(change)
            if len(seen) == 7:
                break
    assert seen == [
        Change("a", 1, A),
        Change("a", 2, None),
        Change("b", 3, B),
        Change("b", 4, None),
        Change("c", 5, None),
        Change("d", 0, C),
        Change("d", 0, None),
    ]
    assert bucket.watch_calls == [("x.>", {"include_history": True})]
    assert watcher.stops == 1
    bucket.watchers.append(FakeWatcher([]))
    async with aclosing(store(bucket).watch()) as changes:
        assert [change async for change in changes] == []
    assert bucket.watch_calls[-1] == (">", {"include_history": False})


# settled: when the current values are all in.


async def marks(watcher: FakeWatcher, *, within: float | None = None) -> list[str | None]:
    seen: list[str | None] = []

    async def read() -> None:
        async for item in settled(watcher):
            seen.append(None if item is None else item.key)

    if within is None:
        await read()
    else:
        reading = asyncio.create_task(read())
        await asyncio.wait([reading], timeout=within)
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
    return seen


async def test_a_marker_before_a_value_the_consumer_sent_waits_for_it() -> None:
    first = FakeWatcher([None, entry("a", b"1", 1, delta=0)], delivered=1)
    assert await soon(marks(first)) == ["a", None]
    second = FakeWatcher([entry("a", b"1", 1, delta=1), None, entry("b", b"2", 2, delta=0)], delivered=2)
    assert await soon(marks(second)) == ["a", "b", None]


async def test_a_watch_that_delivered_nothing_yet_waits_for_its_marker_through_a_silence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kv, "_MARKER_RECHECK", 0.01)
    assert await marks(FakeWatcher([], ends=False), within=0.2) == []


async def test_a_marker_right_after_the_values_delivered_is_given_at_once() -> None:
    assert await soon(marks(FakeWatcher([entry("a", b"1", 1, delta=1), None], delivered=1))) == ["a", None]
    two = FakeWatcher([entry("a", b"1", 1, delta=2), entry("b", b"2", 2, delta=1), None], delivered=2)
    assert await soon(marks(two)) == ["a", "b", None]
    pending = FakeWatcher([entry("a", b"1", 1, delta=1), None, entry("b", b"2", 2)], delivered=1, pending=1)
    assert await soon(marks(pending)) == ["a", "b", None]


async def test_an_early_marker_then_silence_asks_the_server_and_marks_once_nothing_is_pending(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kv, "_MARKER_RECHECK", 0.01)

    class Draining(FakeWatcher):
        asked = 0

        async def consumer_info(self) -> Any:
            self.asked += 1
            if self.asked > 3:
                self.info.num_pending = 0
            return self.info

    watcher = Draining([None, entry("a", b"1", 1, delta=1)], delivered=2, pending=1, ends=False)
    assert await soon(marks(watcher, within=0.3)) == ["a", None]
    assert watcher.asked == 4  # the early marker's, then one per silence until nothing was pending


# KeyWatch.


class Calls:
    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    def apply(self, key: str, revision: int, value: bytes | None) -> None:
        self.seen.append(("apply", key, revision, value))

    def opened(self) -> None:
        self.seen.append(("open",))

    def current(self) -> None:
        self.seen.append(("current",))


async def test_a_key_watch_hands_over_values_deletes_and_purges_and_reopens_a_broken_watch(
    pauses: list[float],
) -> None:
    bucket = FakeKV()
    calls = Calls()
    watch = KeyWatch(
        lambda: _opened(bucket),
        "x.>",
        calls.apply,
        what="holders",
        on_open=lambda: calls.seen.append(("open", list(pauses))),
        on_current=calls.current,
        retry_after=0.25,
    )
    assert [watch.closed] == [False]  # False itself, not merely falsy
    broken = FakeWatcher(
        [
            entry("x.a", b"1", 1, delta=1),
            entry("x.b", b"2", 2),
            None,
            entry("x.a", None, 3, operation=KV_DEL),
            entry("x.b", b"2", 4, operation=KV_PURGE),
            entry("x.c", None, 5),
            entry("x.d", b"4", 0),
        ],
        then=nats.errors.NoServersError,
    )
    again = FakeWatcher([entry("x.b", b"5", 6), None], ends=False)
    bucket.watchers += [broken, again]
    with capture_logs() as logs:
        running = asyncio.create_task(watch.run())
        await soon(again.waiting.wait())
        await soon(watch.close())
        await soon(running)
    assert calls.seen == [
        ("open", []),
        ("apply", "x.a", 1, b"1"),
        ("apply", "x.b", 2, b"2"),
        ("current",),
        ("apply", "x.a", 3, None),
        ("apply", "x.b", 4, None),
        ("apply", "x.c", 5, None),
        ("open", [0.25]),  # opened again after the pause
        ("apply", "x.b", 6, b"5"),
        ("current",),
    ]
    assert bucket.watch_calls == [("x.>", {}), ("x.>", {})]
    assert pauses == [0.25]  # once, after the broken watch; none after the close
    assert (broken.stops, again.stops) == (1, 2)  # the second by close, then as run ends
    assert watch.closed
    assert logs == [
        {
            "event": "watching a stored key failed; retrying",
            "what": "holders",
            "error": str(nats.errors.NoServersError()),
            "log_level": "warning",
        }
    ]


async def _opened(bucket: FakeKV) -> Any:
    return bucket.as_kv()


async def test_a_key_watch_without_callbacks_applies_the_changes_alone() -> None:
    bucket = FakeKV()
    calls = Calls()
    watch = KeyWatch(lambda: _opened(bucket), ">", calls.apply, what="x")
    watcher = FakeWatcher([entry("a", b"1", 1), None, entry("b", b"2", 2)], ends=False)
    bucket.watchers.append(watcher)
    running = asyncio.create_task(watch.run())
    await soon(watcher.waiting.wait())
    await soon(watch.close())
    await soon(running)
    assert calls.seen == [("apply", "a", 1, b"1"), ("apply", "b", 2, b"2")]


async def test_a_key_watch_closed_while_its_watch_opens_stops_that_watch_and_ends() -> None:
    bucket = FakeKV()
    calls = Calls()
    watcher = FakeWatcher([entry("a", b"1", 1)], ends=False)
    bucket.watchers.append(watcher)

    async def opening() -> Any:
        await soon(watch.close())  # closed before the watch is handed back
        return bucket.as_kv()

    watch = KeyWatch(opening, ">", calls.apply, what="x", on_open=calls.opened)
    await soon(watch.run())
    assert calls.seen == []
    assert watcher.stops == 1
    assert watch.closed


async def test_a_key_watch_whose_watcher_fails_to_stop_goes_on_and_closes() -> None:
    bucket = FakeKV()
    calls = Calls()

    class Stubborn(FakeWatcher):
        async def stop(self) -> None:
            await super().stop()
            raise nats.errors.ConnectionClosedError

    watcher = Stubborn([entry("a", b"1", 1)], ends=False)
    bucket.watchers.append(watcher)
    watch = KeyWatch(lambda: _opened(bucket), ">", calls.apply, what="x", retry_after=0)
    running = asyncio.create_task(watch.run())
    await soon(watcher.waiting.wait())
    await soon(watch.close())
    await soon(running)
    assert calls.seen == [("apply", "a", 1, b"1")]
    assert watcher.stops == 2  # by close, then by run's own ending
    await soon(KeyWatch(lambda: _opened(bucket), ">", calls.apply, what="x").close())  # never opened


async def test_a_key_watch_whose_bucket_cannot_be_opened_tries_again_after_a_second(
    pauses: list[float],
) -> None:
    opened = 0

    async def opening() -> Any:
        nonlocal opened
        opened += 1
        if opened == 1:
            raise nats.errors.NoServersError
        raise KeyError("not the bus: a bug")

    with pytest.raises(KeyError):
        await soon(KeyWatch(opening, ">", Calls().apply, what="x").run())
    assert pauses == [1.0]


async def test_a_key_watch_closed_while_it_waits_to_reopen_ends_without_touching_the_broken_watch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket = FakeKV()
    broken = FakeWatcher([entry("a", b"1", 1)], then=nats.errors.NoServersError)
    bucket.watchers.append(broken)
    waiting = asyncio.Event()
    gate = asyncio.Event()

    async def sleep(delay: float, result: Any = None) -> Any:
        waiting.set()
        await gate.wait()
        return result

    monkeypatch.setattr(asyncio, "sleep", sleep)
    watch = KeyWatch(lambda: _opened(bucket), ">", Calls().apply, what="x", retry_after=30.0)
    running = asyncio.create_task(watch.run())
    await soon(waiting.wait())
    await soon(watch.close())
    gate.set()
    await soon(running)
    assert broken.stops == 1  # by run, as the watch broke; close found none open
    assert bucket.watchers == []  # and it was not opened again


async def test_a_store_opened_on_a_bucket_names_that_bucket() -> None:
    bucket = FakeKV()
    asked: list[str] = []

    class Jets:
        async def key_value(self, name: str) -> Any:
            asked.append(name)
            return bucket.as_kv()

    holders = await soon(ModelStore.open(Jets(), "holders", Holder))  # type: ignore[arg-type]
    assert (holders.bucket, asked) == ("holders", ["holders"])
    bucket.set("k", raw(A))
    with pytest.raises(KVConflictError, match="bucket 'holders'"):
        await soon(holders.create("k", B))
