"""The alerting configuration in JetStream KV: written by `pai alert-rules set`, watched here.

The value is the operator's YAML text, kept as written (comments included) so `get` shows what
was set. Watching applies the current text at once and every later change; a text that no
longer validates is logged and skipped, so a bad edit never stops alerting on the last good one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import structlog
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KV_DEL, KV_PURGE

from libs.backbone.provisioning import KVSpec, ensure_kv
from services.alerter.core.config import AlertConfig, ConfigError, load_config

log = structlog.get_logger(__name__)

RULES_BUCKET = KVSpec("PAI_ALERT_RULES", history=5, description="the alerting configuration (YAML)")
RULES_KEY = "config"


async def put_rules(js: JetStreamContext, text: str) -> int:
    """Validate and store ``text``; ConfigError if it is refused. Returns the KV revision."""
    load_config(text)
    kv = await ensure_kv(js, RULES_BUCKET)
    return int(await kv.put(RULES_KEY, text.encode()))


async def get_rules(js: JetStreamContext) -> str | None:
    kv = await ensure_kv(js, RULES_BUCKET)
    try:
        entry = await kv.get(RULES_KEY)
    except KeyNotFoundError:
        return None
    return None if entry.value is None else entry.value.decode()


def _parsed(text: str) -> AlertConfig | None:
    try:
        return load_config(text)
    except ConfigError as exc:
        log.error("stored alerting configuration refused; keeping the last good one", error=str(exc))
        return None


class RulesWatch:
    """Reads the stored configuration (`load`) and applies each change (`run`) until `close`.

    `close` ends `run` by stopping the watcher: a cancel alone can be swallowed by the client
    while the watch is being opened, which would leave `run` waiting forever.
    """

    def __init__(self, js: JetStreamContext, apply: Callable[[AlertConfig | None], None]) -> None:
        self.js = js
        self.apply = apply
        self._closed = False
        self._watcher: Any = None

    async def load(self) -> AlertConfig | None:
        """The configuration stored now; None when nothing (valid) is stored."""
        text = await get_rules(self.js)
        return None if text is None else _parsed(text)

    async def run(self) -> None:
        while not self._closed:
            try:
                kv = await ensure_kv(self.js, RULES_BUCKET)
                self._watcher = watcher = await kv.watch(RULES_KEY)
                try:
                    if self.closed:
                        break  # closed while the watch was being opened
                    async for entry in watcher:
                        if entry is None:
                            continue
                        if entry.operation in (KV_DEL, KV_PURGE) or entry.value is None:
                            self.apply(None)
                        elif (config := _parsed(entry.value.decode())) is not None:
                            self.apply(config)
                finally:
                    self._watcher = None
                    with contextlib.suppress(Exception):
                        await watcher.stop()  # type: ignore[no-untyped-call]
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the bus went away: try again; the configuration in force stays
                log.warning("watching the alerting configuration failed; retrying", error=str(exc))
            if not self._closed:
                await asyncio.sleep(1.0)

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        self._closed = True
        watcher = self._watcher
        if watcher is not None:
            with contextlib.suppress(Exception):
                await watcher.stop()
