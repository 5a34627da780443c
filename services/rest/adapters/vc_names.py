"""Which virtual clusters exist, so a submission naming another one is refused at once.

The scheduler owns the VCs. A config an admin set at run time is stored in KV
``PAI_SCHEDULER_CONFIG`` (key ``hived``) before the scheduler applies it, and wins over the
scheduler's file when it starts, so while that key names VCs they are the truth: a watch keeps
them here and no submission asks anyone. Without it (VCs from the scheduler's file, or the one
``default`` VC it derives from the nodes) the scheduler is asked over request/reply and its
answer kept for a while; a name missing from it asks again (at most once a second), since the
scheduler may have restarted with another file. When nobody can tell (no scheduler answered
yet, or it knows no VC before any node reported) the submission is accepted, and the scheduler
names the unknown VC in the job's pending reason.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import nats.errors
import structlog
from aiohttp import web
from nats.aio.client import Client as NATS
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from libs.backbone.kv import KeyWatch
from libs.backbone.topology import SCHEDULER_CONFIG
from libs.protocol.subjects import VC_STATUS_RPC
from libs.web.background import BACKGROUND, Background
from services.rest.keys import BUS

log = structlog.get_logger(__name__)

# The scheduler's key in its config bucket (the bucket's description names it).
CONFIG_KEY = "hived"


def names_in_config(value: bytes | None) -> frozenset[str] | None:
    """The VC names of a stored scheduler config; None when it names none or is unreadable."""
    try:
        document = json.loads(value or b"")
    except ValueError:
        return None
    hived = document.get("hived") if isinstance(document, dict) else None
    vcs = hived.get("virtualClusters") if isinstance(hived, dict) else None
    if hived is None and isinstance(document, dict) and isinstance(document.get("vcs"), dict):
        # VCs an admin set over cells derived from the nodes, beside the default VC.
        return frozenset({"default", *(str(name) for name in document["vcs"])})
    if not isinstance(vcs, dict) or not vcs:
        return None
    return frozenset(str(name) for name in vcs)


def names_in_status(answer: Any) -> frozenset[str] | None:
    """The VC names of a scheduler status answer (a report, or a bare list); None when empty."""
    vcs = answer.get("virtualClusters") if isinstance(answer, dict) else answer
    if not isinstance(vcs, list):
        return None
    names = frozenset(str(vc["name"]) for vc in vcs if isinstance(vc, dict) and "name" in vc)
    return names or None


class VirtualClusterNames:
    """The VC names in force, from the stored config (watched) or the scheduler (asked, kept)."""

    def __init__(
        self,
        nc: NATS,
        kv: KeyValue | None,
        *,
        ask_timeout: float = 1.0,
        keep_for: float = 30.0,
        ask_again_after: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nc = nc
        self._kv = kv
        self._ask_timeout = ask_timeout
        self._keep_for = keep_for
        self._ask_again_after = ask_again_after
        self._clock = clock
        self._stored: frozenset[str] | None = None
        self._stored_revision = 0
        self._asked: tuple[frozenset[str], float] | None = None
        self._asking = asyncio.Lock()
        self._watch = KeyWatch(
            self._bucket,
            CONFIG_KEY,
            lambda _key, revision, value: self._store(revision, value),
            what="scheduler config",
        )

    async def _bucket(self) -> KeyValue:
        assert self._kv is not None, "watch() returns at once without a bucket"
        return self._kv

    async def names(self, wanted: str) -> frozenset[str] | None:
        """The VCs that exist, fresh enough to judge ``wanted``; None when nobody can tell."""
        if (known := self._known(wanted)) is not None:
            return known
        async with self._asking:  # one question at a time; the others take its answer
            if (known := self._known(wanted)) is not None:
                return known  # stored or answered while this one waited
            answered = await self._ask()
            if answered is not None:
                self._asked = (answered, self._clock())
                return answered
            # The scheduler is away: a set it gave earlier beats not knowing.
            return self._asked[0] if self._asked is not None else None

    def _known(self, wanted: str) -> frozenset[str] | None:
        if self._stored is not None:
            return self._stored
        if self._asked is None:
            return None
        names, at = self._asked
        age = self._clock() - at
        if age < self._ask_again_after or (wanted in names and age < self._keep_for):
            return names
        return None

    async def _ask(self) -> frozenset[str] | None:
        try:
            reply = await self._nc.request(VC_STATUS_RPC, b"{}", timeout=self._ask_timeout)
            return names_in_status(json.loads(reply.data or b"null"))
        except (TimeoutError, nats.errors.Error, ValueError) as err:
            if self._asked is not None:  # it answered before: say that an older answer judges
                log.warning(
                    "the scheduler did not answer; judging by the VCs it named before", error=repr(err)
                )
            return None

    def _store(self, revision: int, value: bytes | None) -> None:
        if revision < self._stored_revision:
            return
        self._stored_revision = revision
        self._stored = names_in_config(value)

    async def load(self) -> None:
        """Read the stored config once (the watch then keeps it current)."""
        if self._kv is None:
            return
        try:
            entry = await self._kv.get(CONFIG_KEY)
        except KeyNotFoundError:
            return
        self._store(entry.revision or 0, entry.value)

    async def watch(self) -> None:
        """Follow the stored config until ``close``; a broken watch is opened again."""
        if self._kv is not None:
            await self._watch.run()

    @property
    def closed(self) -> bool:
        return self._watch.closed

    async def close(self) -> None:
        """End ``watch`` (stopping its watcher)."""
        await self._watch.close()


VC_NAMES = web.AppKey("vc_names", VirtualClusterNames)


async def vc_names_ctx(app: web.Application) -> AsyncIterator[None]:
    """Open after the bus: read the stored scheduler config, then follow it."""
    bus = app[BUS].bus
    names = VirtualClusterNames(bus.nc, await bus.js.key_value(SCHEDULER_CONFIG.bucket))
    await names.load()
    # In the app's task group: a watch that raises stops the service (libs/web/background.py).
    watching = app[BACKGROUND].start(names.watch(), name="vc-names")
    app[VC_NAMES] = names
    yield
    await names.close()
    await Background.stop(watching, within=0)
