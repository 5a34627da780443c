"""Typed state in JetStream KV with optimistic concurrency.

A service keeps its own state in a KV bucket as pydantic models. Writers that read, decide and
write back pass the revision they read; if another writer got there first the write fails with
``KVConflictError`` and the caller re-reads and decides again, so two replicas (or a replica
and its own redelivered message) never overwrite each other's decisions silently.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import structlog
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError, NoKeysError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue
from pydantic import BaseModel

from libs.backbone.errors import KVConflictError

M = TypeVar("M", bound=BaseModel)

log = structlog.get_logger(__name__)


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

    async def delete(self, key: str, last_revision: int | None = None) -> None:
        """Delete (a tombstone watchers see); with ``last_revision``, only if unchanged."""
        try:
            await self._kv.delete(key, last=last_revision)
        except KeyWrongLastSequenceError as exc:
            raise KVConflictError(self.bucket, key, last_revision) from exc

    async def keys(self) -> list[str]:
        try:
            return list(await self._kv.keys())
        except NoKeysError:
            return []

    async def watch(
        self, keys: str = ">", *, include_history: bool = False
    ) -> AsyncGenerator[Change[M], None]:
        """Yield the current values, then every change, until the caller stops iterating.

        Close it with ``contextlib.aclosing`` (or break out of ``async for``) to unsubscribe.
        """
        watcher = await self._kv.watch(keys, include_history=include_history)
        try:
            async for entry in watcher:
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
                    async for entry in watcher:
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
                    with contextlib.suppress(Exception):
                        await watcher.stop()  # type: ignore[no-untyped-call]
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the bus went away: try again; what is in force stays
                log.warning("watching a stored key failed; retrying", what=self._what, error=str(exc))
            if not self._closed:
                await asyncio.sleep(self._retry_after)

    async def close(self) -> None:
        self._closed = True
        watcher = self._watcher
        if watcher is not None:
            with contextlib.suppress(Exception):
                await watcher.stop()
