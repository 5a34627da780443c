"""A JetStream KV bucket in memory, for the bus adapters' retry paths (libs/backbone: leasing,
fencing, kv): each request can be told to fail, to go unanswered after it was stored, to wait
for ever, or to let another writer in first, which a real server does not do on demand.

Revisions grow by one per write over the whole bucket, as a stream's sequence does; a delete
leaves a tombstone (operation DEL) that reads as absent and that `update` counts as the key's
revision. Every request is recorded in `calls` as (method, key, value, last).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, TypeVar, cast

from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KV_DEL, KeyValue


@dataclass
class Entry:
    key: str
    value: bytes | None
    revision: int
    operation: str | None = None
    delta: int = 0


@dataclass(frozen=True)
class Lost:
    """The request is carried out, then its answer is lost: `error` is raised instead."""

    error: BaseException


T = TypeVar("T")

# Each request lets the loop run, as one over the network does (a retry loop that never waits
# would otherwise hold it); the real sleep, whatever a test puts in asyncio's place.
_pass_turn = asyncio.sleep

# How long a call under test may take before the test fails: a bug that makes a retry loop go
# on for ever fails the test in seconds.
WITHIN = 5.0


def soon(call: Awaitable[T]) -> Awaitable[T]:
    return asyncio.wait_for(call, WITHIN)


# The request is never answered (a server that went away while the client waits).
HANG = object()
# The request goes through as usual (a place holder in a script of outcomes).
PASS = object()


class FakeKV:
    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        self.sequence = 0
        self.calls: list[tuple[str, str, bytes | None, int | None]] = []
        self._script: dict[str, list[object]] = defaultdict(list)
        self.watchers: list[FakeWatcher] = []
        self.watch_calls: list[tuple[str, dict[str, Any]]] = []

    def as_kv(self) -> KeyValue:
        return cast(KeyValue, self)

    def script(self, method: str, *outcomes: object) -> None:
        """The next requests of `method`, one outcome each: an exception (raised, nothing
        stored), `Lost(error)`, `HANG`, `PASS`, or a callable run with this bucket first (another
        writer getting in before the request; an exception it returns is raised)."""
        self._script[method].extend(outcomes)

    def set(self, key: str, value: bytes | None) -> int:
        """Another writer's value (None: an entry without a value), stored at the next revision."""
        self.sequence += 1
        self.entries[key] = Entry(key, value, self.sequence)
        return self.sequence

    def value(self, key: str) -> bytes | None:
        entry = self.entries.get(key)
        return None if entry is None or entry.operation == KV_DEL else entry.value

    async def _outcome(self, method: str) -> BaseException | None:
        await _pass_turn(0)
        if not self._script[method]:
            return None
        outcome = self._script[method].pop(0)
        if outcome is HANG:
            await asyncio.Event().wait()
        if isinstance(outcome, Lost):
            return outcome.error
        if isinstance(outcome, BaseException):
            raise outcome
        if callable(outcome):
            raised = outcome(self)
            if isinstance(raised, BaseException):
                raise raised
        return None

    async def get(self, key: str) -> Entry:
        self.calls.append(("get", key, None, None))
        lost = await self._outcome("get")
        entry = self.entries.get(key)
        if entry is None or entry.operation == KV_DEL:
            raise KeyNotFoundError
        found = Entry(entry.key, entry.value, entry.revision, entry.operation)
        if lost is not None:
            raise lost
        return found

    async def create(self, key: str, value: bytes) -> int:
        self.calls.append(("create", key, value, None))
        lost = await self._outcome("create")
        entry = self.entries.get(key)
        if entry is not None and entry.operation != KV_DEL and entry.value is not None:
            raise KeyWrongLastSequenceError
        return self._store(key, value, lost)

    async def update(self, key: str, value: bytes, last: int | None = None) -> int:
        self.calls.append(("update", key, value, last))
        lost = await self._outcome("update")
        entry = self.entries.get(key)
        if (entry.revision if entry is not None else 0) != (last or 0):
            raise KeyWrongLastSequenceError
        return self._store(key, value, lost)

    async def put(self, key: str, value: bytes) -> int:
        self.calls.append(("put", key, value, None))
        lost = await self._outcome("put")
        return self._store(key, value, lost)

    async def delete(self, key: str, last: int | None = None) -> bool:
        self.calls.append(("delete", key, None, last))
        lost = await self._outcome("delete")
        entry = self.entries.get(key)
        if last is not None and (entry.revision if entry is not None else 0) != last:
            raise KeyWrongLastSequenceError
        self.sequence += 1
        self.entries[key] = Entry(key, None, self.sequence, KV_DEL)
        if lost is not None:
            raise lost
        return True

    def _store(self, key: str, value: bytes, lost: BaseException | None) -> int:
        self.sequence += 1
        self.entries[key] = Entry(key, value, self.sequence)
        if lost is not None:
            raise lost
        return self.sequence

    async def watch(self, keys: str, **options: Any) -> FakeWatcher:
        self.watch_calls.append((keys, options))
        lost = await self._outcome("watch")
        if lost is not None:
            raise lost
        return self.watchers.pop(0)


class FakeWatcher:
    """A nats-py KV watcher: the entries it was given (None is the "current values are all in"
    marker), then nothing until stopped (`ends`: it ends instead); its consumer's info is asked
    for through `_sub`, as nats-py keeps it."""

    def __init__(
        self,
        items: list[Any],
        *,
        delivered: int | None = None,
        pending: int = 0,
        ends: bool = True,
        then: Callable[[], BaseException] | None = None,
    ) -> None:
        self.items = list(items)
        delivered = sum(1 for item in items if item is not None) if delivered is None else delivered
        self.info = SimpleNamespace(num_pending=pending, delivered=SimpleNamespace(consumer_seq=delivered))
        self._sub = self
        self.ends = ends
        self.then = then  # raised once the items are out (the bus going away mid-watch)
        self.stops = 0
        self.stopped = asyncio.Event()
        self.waiting = asyncio.Event()  # set once it waits for an entry that is not there

    async def consumer_info(self) -> Any:
        return self.info

    async def stop(self) -> None:
        self.stops += 1
        self.stopped.set()

    def __aiter__(self) -> FakeWatcher:
        return self

    async def __anext__(self) -> Any:
        if self.items:
            return self.items.pop(0)
        if self.then is not None:
            raise self.then()
        if not self.ends:
            self.waiting.set()
            await self.stopped.wait()
        raise StopAsyncIteration


def entry(
    key: str, value: bytes | None, revision: int, *, operation: str | None = None, delta: int = 0
) -> Entry:
    return Entry(key, value, revision, operation, delta)
