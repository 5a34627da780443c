"""Typed state in JetStream KV with optimistic concurrency.

A service keeps its own state in a KV bucket as pydantic models. Writers that read, decide and
write back pass the revision they read; if another writer got there first the write fails with
``KVConflictError`` and the caller re-reads and decides again, so two replicas (or a replica
and its own redelivered message) never overwrite each other's decisions silently.

A write whose request goes unanswered (the server died after storing it, or the client kept it
in its buffer while the server was away, gave up waiting, and sent it once reconnected) may be
stored all the same. ``write`` settles that by reading the key back before it returns, so a
caller that acts on what it wrote never mistakes a stored write for a lost one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import nats.errors
import nats.js.errors
import structlog
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue
from pydantic import BaseModel

from libs.backbone.errors import TRANSIENT_ERRORS, KVConflictError

M = TypeVar("M", bound=BaseModel)

log = structlog.get_logger(__name__)

# A request these end was not answered: it may or may not have been stored.
UNANSWERED: tuple[type[Exception], ...] = (
    TimeoutError,  # nats.errors.TimeoutError is one
    ConnectionError,  # the socket went away under the request
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.errors.OutboundBufferLimitError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
)
# How often an unanswered write is read back while the bus is away: 0.2 s doubling to 5 s.
_SETTLE_FIRST = 0.2
_SETTLE_MAX = 5.0


# After a "current values are all in" marker that came before the values, how long a watch waits
# for the next one before it asks the server again whether anything is left to deliver.
_MARKER_RECHECK = 5.0


async def settled(watcher: Any) -> AsyncIterator[Any]:
    """A nats-py KV watcher's entries, with its "current values are all in" marker (None) yielded
    once, when they truly are.

    nats-py puts the marker first when the consumer's info says nothing is pending and no message
    has arrived yet. On a NATS cluster that info can overtake the messages the consumer already
    sent (they travel between the servers by another route), so the marker comes before the
    values and a read that stops at it misses them: measured on three servers, about one
    whole-bucket read in 25. Here a marker counts only when the consumer has delivered no more
    than has arrived; otherwise the values are in with the entry that had nothing pending after
    it (its ``delta``), however long they take.
    """
    seen = 0
    done = False
    early = False  # a marker came before values the consumer had sent
    while True:
        try:
            if early and not done:
                entry = await asyncio.wait_for(anext(watcher), _MARKER_RECHECK)
            else:
                entry = await anext(watcher)
        except StopAsyncIteration:
            return
        except TimeoutError:
            # Nothing for a while after an early marker: the last message delivered may have
            # been a server marker nats-py passes over; done if nothing is left to deliver.
            info = await watcher._sub.consumer_info()  # nats-py keeps the subscription there
            if not info.num_pending:
                done = True
                yield None
            continue
        if entry is None:
            if done:
                continue
            info = await watcher._sub.consumer_info()
            if info.delivered.consumer_seq <= seen and not info.num_pending:
                done = True
                yield None
            else:
                early = True
            continue
        seen += 1
        yield entry
        if not done and not entry.delta:
            done = True
            yield None


# How long a whole read waits for a server that holds its bucket's stream but is behind it (back
# from a freeze or a restart, still catching up) before it gives up with a TimeoutError.
_BEHIND_PATIENCE = 5.0


async def _last_stored(kv: KeyValue) -> int | None:
    """The sequence of the newest message of the bucket's stream, as its leader answers (None
    where this is no bucket of a server's, or its stream holds nothing)."""
    js, stream = getattr(kv, "_js", None), getattr(kv, "_stream", None)
    if js is None or not isinstance(stream, str):
        return None
    info = await js.stream_info(stream)
    return int(info.state.last_seq) if info.state.messages else None


async def _read_once(kv: KeyValue, keys: str, meta_only: bool) -> tuple[dict[str, Any], int]:
    found: dict[str, Any] = {}
    newest = 0
    watcher = await kv.watch(keys, meta_only=meta_only)
    try:
        async for entry in settled(watcher):
            if entry is None:
                break
            newest = max(newest, entry.revision or 0)
            if entry.operation in (KV_DEL, KV_PURGE) or not (meta_only or entry.value):
                found.pop(entry.key, None)
            else:
                found[entry.key] = entry
    finally:
        await watcher.stop()  # type: ignore[no-untyped-call]
    return found, newest


async def current_entries(kv: KeyValue, keys: str = ">", *, meta_only: bool = False) -> dict[str, Any]:
    """Every live entry whose key matches ``keys`` (key -> entry), read in one pass: complete on
    a NATS cluster too (`settled`). ``meta_only``: without their values (for the keys alone).

    A whole bucket's read (``keys`` ">") is checked against its stream's newest message as the
    stream's leader knows it before the read: the newest revision of a key is always delivered,
    so a read that comes back without it was served by a server still catching up (a takeover
    that reads the alerter's notification log from one would send everything again). It is read
    again until it has it, for ``_BEHIND_PATIENCE`` seconds, then TimeoutError (the bus's kind
    of error: callers try again)."""
    floor = await _last_stored(kv) if keys == ">" else None
    deadline = asyncio.get_running_loop().time() + _BEHIND_PATIENCE
    while True:
        found, newest = await _read_once(kv, keys, meta_only)
        if floor is None or newest >= floor:
            return found
        if asyncio.get_running_loop().time() >= deadline:
            raise TimeoutError(
                f"a read of {getattr(kv, '_stream', 'the bucket')} came back behind its stream "
                f"(revision {newest} of {floor}): a server still catching up"
            )
        log.warning("a bucket read came back behind its stream; reading again", newest=newest, stored=floor)
        await asyncio.sleep(0.2)  # a server catching up: nothing to await but its progress


@dataclass(frozen=True)
class Versioned(Generic[M]):
    """A value with the revision it was read at; pass the revision back to ``update``."""

    value: M
    revision: int


@dataclass(frozen=True)
class Change(Generic[M]):
    """One change seen by a watch: ``value`` is None when the key was deleted or purged."""

    key: str
    revision: int
    value: M | None


class ModelStore(Generic[M]):
    """One KV bucket whose values are all instances of one pydantic model."""

    def __init__(self, kv: KeyValue, model: type[M], bucket: str) -> None:
        self._kv = kv
        self._model = model
        self.bucket = bucket

    @classmethod
    async def open(cls, js: JetStreamContext, bucket: str, model: type[M]) -> ModelStore[M]:
        """Bind to an existing bucket (provision it first with ``ensure_kv``)."""
        return cls(await js.key_value(bucket), model, bucket)

    def _encode(self, value: M) -> bytes:
        return value.model_dump_json().encode()

    async def get(self, key: str) -> Versioned[M] | None:
        """The current value and its revision, or None when absent or deleted."""
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError:
            return None
        if entry.value is None:
            return None
        return Versioned(self._model.model_validate_json(entry.value), entry.revision or 0)

    async def put(self, key: str, value: M) -> int:
        """Write unconditionally (last writer wins); returns the new revision."""
        return int(await self._kv.put(key, self._encode(value)))

    async def create(self, key: str, value: M) -> int:
        """Write only if the key is absent (or deleted); ``KVConflictError`` if it exists."""
        try:
            return int(await self._kv.create(key, self._encode(value)))
        except KeyWrongLastSequenceError as exc:
            raise KVConflictError(self.bucket, key, None) from exc

    async def create_if_absent(self, key: str, value: M) -> Versioned[M]:
        """The existing value if there is one, else ``value`` newly written."""
        while True:
            current = await self.get(key)
            if current is not None:
                return current
            try:
                return Versioned(value, await self.create(key, value))
            except KVConflictError:
                continue  # created concurrently; read what won

    async def update(self, key: str, value: M, last_revision: int) -> int:
        """Write only if the key is still at ``last_revision``; ``KVConflictError`` otherwise."""
        try:
            return int(await self._kv.update(key, self._encode(value), last=last_revision))
        except KeyWrongLastSequenceError as exc:
            raise KVConflictError(self.bucket, key, last_revision) from exc

    async def write(self, key: str, value: M, last_revision: int | None) -> int:
        """``create`` (``last_revision`` None) or ``update``, returning only once the outcome is known.

        Returns the revision ``value`` is stored at. When the request goes unanswered the key is
        read back, as often as it takes for the bus to answer: holding ``value``, the write was
        stored; still at ``last_revision``, it was not (yet), and is sent again with the same
        condition, so of the two requests at most one is stored. ``KVConflictError`` when the
        key moved on to anything else, as for a plain write.
        """
        try:
            return await self._write_once(key, value, last_revision)
        except UNANSWERED as exc:
            log.warning(
                "state write unanswered; reading it back", bucket=self.bucket, key=key, error=repr(exc)
            )
        pause = _SETTLE_FIRST
        while True:
            await asyncio.sleep(pause)  # the bus is likely away: a timer, not a wait for an event
            pause = min(pause * 2, _SETTLE_MAX)
            try:
                current = await self.get(key)
            except UNANSWERED:
                continue
            if current is not None and current.value == value:
                log.info("unanswered state write was stored", bucket=self.bucket, key=key)
                return current.revision
            if (current.revision if current is not None else None) != last_revision:
                raise KVConflictError(self.bucket, key, last_revision)  # another writer's value
            try:
                return await self._write_once(key, value, last_revision)
            except KVConflictError:
                continue  # the earlier request was stored meanwhile (or another writer's): look again
            except UNANSWERED:
                continue

    async def _write_once(self, key: str, value: M, last_revision: int | None) -> int:
        if last_revision is None:
            return await self.create(key, value)
        return await self.update(key, value, last_revision)

    async def delete(self, key: str, last_revision: int | None = None) -> None:
        """Delete (a tombstone watchers see); with ``last_revision``, only if unchanged."""
        try:
            await self._kv.delete(key, last=last_revision)
        except KeyWrongLastSequenceError as exc:
            raise KVConflictError(self.bucket, key, last_revision) from exc

    async def keys(self) -> list[str]:
        return list(await current_entries(self._kv, meta_only=True))

    async def current(self) -> dict[str, Versioned[M]]:
        """Every live value (key -> value and revision), read in one pass."""
        return {
            key: Versioned(self._model.model_validate_json(entry.value), entry.revision or 0)
            for key, entry in (await current_entries(self._kv)).items()
        }

    async def watch(
        self, keys: str = ">", *, include_history: bool = False
    ) -> AsyncGenerator[Change[M], None]:
        """Yield the current values, then every change, until the caller stops iterating.

        Close it with ``contextlib.aclosing`` (or break out of ``async for``) to unsubscribe.
        """
        watcher = await self._kv.watch(keys, include_history=include_history)
        try:
            async for entry in settled(watcher):
                if entry is None:
                    continue  # the "initial values done" marker
                if entry.operation in (KV_DEL, KV_PURGE) or entry.value is None:
                    yield Change(entry.key, entry.revision or 0, None)
                else:
                    value = self._model.model_validate_json(entry.value)
                    yield Change(entry.key, entry.revision or 0, value)
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]


class KeyWatch:
    """Follows a key (or a wildcard, ">" for a whole bucket): `run` hands every change to `apply`
    until `close`.

    `apply(key, revision, value)` gets the stored bytes, or None when the key was deleted or
    purged. Each time a watch opens, `on_open` is called, then the current values come through
    `apply`, then `on_current` (so a follower can replace what it knew in one step, forgetting
    what was deleted while it was away), then every change as it happens. A watch that breaks
    (the server went away) is opened again after `retry_after` seconds; what is in force stays
    meanwhile. `close` ends `run` by stopping the watcher, because a cancel alone can be
    swallowed by the client while a watch is being opened, which would leave `run` waiting
    forever.
    """

    def __init__(
        self,
        open_bucket: Callable[[], Awaitable[KeyValue]],
        keys: str,
        apply: Callable[[str, int, bytes | None], None],
        *,
        what: str,
        on_open: Callable[[], None] | None = None,
        on_current: Callable[[], None] | None = None,
        retry_after: float = 1.0,
    ) -> None:
        self._open_bucket = open_bucket
        self._keys = keys
        self._apply = apply
        self._what = what
        self._on_open = on_open
        self._on_current = on_current
        self._retry_after = retry_after
        self._watcher: Any = None
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    async def run(self) -> None:
        while not self._closed:
            try:
                bucket = await self._open_bucket()
                self._watcher = watcher = await bucket.watch(self._keys)
                try:
                    if self.closed:
                        break  # closed while the watch was being opened: nothing would stop it later
                    if self._on_open is not None:
                        self._on_open()
                    async for entry in settled(watcher):
                        if entry is None:  # the current values are all in
                            if self._on_current is not None:
                                self._on_current()
                            continue
                        if not entry.revision:
                            continue
                        deleted = entry.operation in (KV_DEL, KV_PURGE) or entry.value is None
                        self._apply(entry.key, entry.revision, None if deleted else entry.value)
                finally:
                    self._watcher = None
                    with contextlib.suppress(*TRANSIENT_ERRORS):
                        await watcher.stop()  # type: ignore[no-untyped-call]
            except TRANSIENT_ERRORS as exc:  # the bus went away: try again; what is in force stays
                log.warning("watching a stored key failed; retrying", what=self._what, error=str(exc))
            if not self._closed:
                await asyncio.sleep(self._retry_after)

    async def close(self) -> None:
        self._closed = True
        watcher = self._watcher
        if watcher is not None:
            with contextlib.suppress(*TRANSIENT_ERRORS):
                await watcher.stop()
