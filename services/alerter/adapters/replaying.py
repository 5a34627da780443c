"""Reading the streams back at start: job and node history, and the alerts the last instance fired.

`follow` reads a stream from its first message with an ordered consumer (as the scheduler
does) and keeps going live: each message says whether it was already in the stream when
following began (history, to apply at its own time) or arrived since (live). `caught_up` is
set once the history is in. No durable consumer is involved, so nothing is acknowledged and a
restart always sees the whole history again.

`firing_alerts` reads the last alert.fired and alert.resolved of every alert in PAI_ALERTS:
those whose last word was "fired" were firing when the previous instance stopped.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import nats.errors
import structlog
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy
from pydantic import ValidationError

from libs.backbone.consuming import subscribe_ordered
from libs.protocol.events import AlertFired, AlertResolved, Event, decode_event
from libs.protocol.subjects import ALERT_SUBJECTS, ALERTS_STREAM
from services.alerter.core.evaluating import Alert, fingerprint

log = structlog.get_logger(__name__)

OnEvent = Callable[[Event, bool], Awaitable[None]]  # (event, from history?)

# `<fingerprint>-<start in ms>-fired`, the id the alerter gives its alert.fired events.
_FIRED_ID = re.compile(r"[0-9a-f]+-(\d+)-fired")


@dataclass
class Following:
    subscription: Subscription
    caught_up: asyncio.Event = field(default_factory=asyncio.Event)


async def follow(js: JetStreamContext, stream: str, subject: str, on_event: OnEvent) -> Following:
    info = await js.stream_info(stream)
    target = info.state.last_seq if info.state.messages else 0
    caught_up = asyncio.Event()
    if not target:
        caught_up.set()

    async def deliver(msg: Msg) -> None:
        sequence = msg.metadata.sequence.stream
        try:
            event = decode_event(msg.data)
        except ValidationError as exc:
            log.warning(
                "ignoring a message that is not a known event", subject=msg.subject, error=str(exc)[:200]
            )
        else:
            try:
                await on_event(event, sequence <= target)
            except Exception:
                log.exception("event not applied", subject=msg.subject)
        if sequence >= target and not caught_up.is_set():
            caught_up.set()
            log.info("history read", stream=stream, sequence=target)

    sub = await subscribe_ordered(js, subject, deliver_policy=DeliverPolicy.ALL, cb=deliver)
    return Following(sub, caught_up)


async def firing_alerts(js: JetStreamContext, *, patience: float = 10.0) -> list[Alert]:
    """The alerts whose last event is alert.fired, as the evaluator knew them."""
    if not (await js.stream_info(ALERTS_STREAM)).state.messages:
        return []
    last: dict[str, tuple[int, AlertFired | AlertResolved]] = {}
    sub = await js.subscribe(
        ALERT_SUBJECTS, ordered_consumer=True, deliver_policy=DeliverPolicy.LAST_PER_SUBJECT
    )
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=patience)
            except nats.errors.TimeoutError:
                log.warning("alert history not read to its end; using what came", alerts=len(last))
                break
            try:
                event = decode_event(msg.data)
            except ValidationError:
                event = None
            sequence = msg.metadata.sequence.stream
            if isinstance(event, AlertFired | AlertResolved):
                seen = last.get(event.alert_id)
                if seen is None or seen[0] < sequence:
                    last[event.alert_id] = (sequence, event)
            if msg.metadata.num_pending == 0:
                break
    finally:
        await sub.unsubscribe()
    alerts = []
    for _, event in last.values():
        if not isinstance(event, AlertFired) or fingerprint(event.labels) != event.alert_id:
            continue
        stamp = _FIRED_ID.fullmatch(event.event_id)
        starts_at = int(stamp.group(1)) / 1000 if stamp else event.occurred_at.timestamp()
        annotations = {"summary": event.summary} if event.summary else {}
        alerts.append(Alert(dict(event.labels), annotations, starts_at))
    return alerts
