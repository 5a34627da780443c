"""The alerting configuration in JetStream KV: written by `pai alert-rules set`, watched here.

The value is the operator's YAML text, kept as written (comments included) so `get` shows what
was set. Watching yields the current text at once and every later change; a text that no
longer validates is logged and skipped, so a bad edit never stops alerting on the last good one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

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


async def watch_rules(js: JetStreamContext) -> AsyncIterator[AlertConfig | None]:
    """Each valid stored configuration as it changes; None when the stored one is deleted."""
    kv = await ensure_kv(js, RULES_BUCKET)
    watcher = await kv.watch(RULES_KEY)
    try:
        async for entry in watcher:
            if entry is None:
                continue
            if entry.operation in (KV_DEL, KV_PURGE) or entry.value is None:
                yield None
                continue
            try:
                yield load_config(entry.value.decode())
            except ConfigError as exc:
                log.error("stored alerting configuration refused; keeping the last good one", error=str(exc))
    finally:
        await watcher.stop()  # type: ignore[no-untyped-call]
