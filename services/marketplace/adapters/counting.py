"""Use counts from the event stream: a durable consumer reads every ``job.submitted``.

A job submitted from an item carries the item's id in ``extras.submitFrom`` (the portal and the
CLI set it from ``GET /items/{id}/job``). Its use is a row keyed by the job id, written with the
count in one transaction, so a redelivered event (a restart, a lost ack) counts nothing twice.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from libs.backbone.consuming import consume
from libs.backbone.provisioning import ConsumerSpec, ensure_consumer
from libs.protocol.events import JobSubmitted, decode_event
from libs.protocol.subjects import JOBS_STREAM, ROOT
from services.marketplace.adapters.storing import Store

DURABLE = "marketplace-uses"
SUBMITTED = f"{ROOT}.job.*.job.submitted"
# The key as every job.submitted's JSON spells it (rest publishes them; keys are never escaped).
SUBMIT_FROM = b'"submitFrom"'


def submitted_from(event: JobSubmitted) -> str | None:
    extras = event.config.extras
    return (extras.submit_from or None) if extras is not None else None


async def count_uses(js: JetStreamContext, store: Store, stop: asyncio.Event) -> None:
    """Consume ``job.submitted`` until ``stop``; each job from an item counts once."""

    async def handle(msg: Msg) -> None:
        if SUBMIT_FROM not in msg.data:  # most jobs: not from an item, and not worth decoding
            return
        event = decode_event(msg.data)
        if not isinstance(event, JobSubmitted):
            return
        item_id = submitted_from(event)
        if item_id is not None:
            await store.record_use(event.job_id, item_id, event.user, datetime.now(UTC))

    await ensure_consumer(
        js,
        ConsumerSpec(
            JOBS_STREAM,
            DURABLE,
            filter_subjects=(SUBMITTED,),
            description="the marketplace's use counts: jobs submitted from an item",
        ),
    )
    await consume(js, JOBS_STREAM, DURABLE, handle, stop=stop, batch=64)
