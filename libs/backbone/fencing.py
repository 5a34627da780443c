"""The scheduler's fences in KV (PAI_FENCES, key `scheduler`): raised by a new leader, read by
whoever acts on its decisions. The rule itself is pure: libs/protocol/fencing.py."""

from __future__ import annotations

import asyncio

import structlog
from nats.js import JetStreamContext
from nats.js.errors import APIError, KeyNotFoundError
from nats.js.kv import KeyValue

from libs.backbone.connecting import patiently
from libs.protocol.fencing import Fence, decode, deposed, encode, with_cut, with_pending
from libs.protocol.subjects import JOBS_STREAM

log = structlog.get_logger(__name__)


FENCES_BUCKET = "PAI_FENCES"
SCHEDULER_FENCE = "scheduler"


class Deposed(Exception):
    """A newer leader has already raised its fence: this one must not decide."""


async def _read(kv: KeyValue, key: str) -> tuple[tuple[Fence, ...], int | None]:
    try:
        entry = await kv.get(key)
    except KeyNotFoundError:
        return (), None
    return decode(entry.value), entry.revision


async def _rewrite(kv: KeyValue, key: str, epoch: int, change: object) -> tuple[Fence, ...]:
    """Apply `change` (fences -> fences) to the record with revision checks until it sticks."""
    assert callable(change)
    while True:
        fences, revision = await _read(kv, key)
        if any(f.epoch > epoch for f in fences):
            raise Deposed(f"a newer scheduler leader (epoch {max(f.epoch for f in fences)}) took over")
        updated: tuple[Fence, ...] = change(fences)
        try:
            if revision is None:
                await kv.create(key, encode(updated))
            else:
                await kv.update(key, encode(updated), last=revision)
        except APIError:  # another leader wrote in between: read again
            await asyncio.sleep(0.05)
            continue
        return updated


async def raise_fence(js: JetStreamContext, kv: KeyValue, epoch: int, key: str = SCHEDULER_FENCE) -> Fence:
    """Record `epoch`'s fence: pending first, then with the job stream's last sequence as its cut.

    Pending before the cut is read: a reader that saw no fence at all acted on a decision stored
    before the pending write, hence at or below the cut, which the new leader also counts.
    """
    await patiently(lambda: _rewrite(kv, key, epoch, lambda fences: with_pending(fences, epoch)))
    cut = (await patiently(lambda: js.stream_info(JOBS_STREAM))).state.last_seq
    await patiently(lambda: _rewrite(kv, key, epoch, lambda fences: with_cut(fences, epoch, cut)))
    log.info("fence raised", epoch=epoch, cut=cut)
    return Fence(epoch, cut)


class FenceReader:
    """Answers whether a scheduler decision came from a deposed leader, reading the record each time
    (one direct get): a cached record could miss the fence that makes a late decision late."""

    def __init__(self, kv: KeyValue, key: str = SCHEDULER_FENCE) -> None:
        self.kv = kv
        self.key = key

    @classmethod
    async def open(cls, js: JetStreamContext) -> FenceReader:
        return cls(await js.key_value(FENCES_BUCKET))

    async def fences(self) -> tuple[Fence, ...]:
        return (await _read(self.kv, self.key))[0]

    async def deposed(self, epoch: int | None, sequence: int) -> bool | None:
        if epoch is None:
            return False
        return deposed(epoch, sequence, await self.fences())
