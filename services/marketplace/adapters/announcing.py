"""Item changes on the bus: ``marketplace.item.*`` on ``PAI_MARKETPLACE``, for tools and the alerter.

The write is the fact; the announcement follows it. A bus that is down when an item changes
loses that announcement (logged), never the change itself.
"""

from __future__ import annotations

import nats.errors
import structlog
from nats.js import JetStreamContext

from libs.backbone.topology import publish_event
from libs.protocol.events import EventBase

log = structlog.get_logger(__name__)


class Announcer:
    def __init__(self, js: JetStreamContext | None) -> None:
        self.js = js

    async def announce(self, event: EventBase) -> None:
        if self.js is None:
            return
        try:
            await publish_event(self.js, event, ack_timeout=5.0)
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("item event not published", event=event.model_dump(mode="json"), error=repr(exc))
