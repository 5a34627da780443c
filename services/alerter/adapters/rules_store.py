"""The alerting configuration in JetStream KV: stored through the REST API, watched here.

`PUT /api/v2/alert-rules` (what `pai alert-rules set` calls) checks the text and stores it in
KV `PAI_ALERT_RULES` under key `config`; `put_rules` does the same for tools already on the bus
(the chaos bench). The value is the operator's YAML text, kept as written (comments included)
so reading it back shows what was set. Watching applies the current text at once and every
later change; a text that no longer validates is logged and skipped, so a bad edit never stops
alerting on the last good one.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError

from libs.alerting.config import AlertConfig, ConfigError, load_config
from libs.backbone.kv import KeyWatch
from libs.backbone.provisioning import ensure_kv
from libs.backbone.topology import ALERT_RULES

log = structlog.get_logger(__name__)

RULES_BUCKET = ALERT_RULES
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
        self._watch = KeyWatch(
            lambda: ensure_kv(js, RULES_BUCKET),
            RULES_KEY,
            lambda _key, _revision, value: self._apply_stored(value),
            what="alerting configuration",
        )

    async def load(self) -> AlertConfig | None:
        """The configuration stored now; None when nothing (valid) is stored."""
        text = await get_rules(self.js)
        return None if text is None else _parsed(text)

    async def run(self) -> None:
        await self._watch.run()

    def _apply_stored(self, value: bytes | None) -> None:
        if value is None:
            self.apply(None)
        elif (config := _parsed(value.decode())) is not None:
            self.apply(config)

    @property
    def closed(self) -> bool:
        return self._watch.closed

    async def close(self) -> None:
        await self._watch.close()
