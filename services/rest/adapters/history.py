"""Reading the facts kept on a stream: one job's lifecycle, the last report of every node.

The read model keeps current state; the streams keep what happened. A route that shows
history (a job's events, the node inventory) reads the stream through a short-lived pull
consumer that delivers every stored message of one subject filter and is deleted after, so
nothing is acknowledged and no durable state is left behind.
"""

from __future__ import annotations

import contextlib
import uuid

import nats.errors
import pydantic
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from libs.protocol.events import Event, decode_event

BATCH = 256


class HistoryUnavailableError(Exception):
    """The stream could not be read (the bus is down or slow)."""


async def read_events(
    js: JetStreamContext, stream: str, subject: str, *, wait: float = 5.0
) -> list[tuple[Event, int]]:
    """Every stored event on ``subject`` in stream order, each with its stream sequence."""
    name = "rest-history-" + uuid.uuid4().hex[:16]
    config = ConsumerConfig(
        name=name,
        filter_subject=subject,
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.NONE,
        inactive_threshold=30.0,
        mem_storage=True,
    )
    found: list[tuple[Event, int]] = []
    try:
        info = await js.add_consumer(stream, config=config)
        pending = info.num_pending or 0
        if pending:
            sub = await js.pull_subscribe_bind(durable=None, stream=stream, name=name)
            try:
                while pending:
                    for msg in await sub.fetch(min(pending, BATCH), timeout=wait):
                        pending = msg.metadata.num_pending
                        # Read tolerantly: a kind of event this version does not know is skipped.
                        with contextlib.suppress(pydantic.ValidationError):
                            found.append((decode_event(msg.data), msg.metadata.sequence.stream))
            finally:
                await sub.unsubscribe()
    except (nats.errors.Error, TimeoutError) as exc:
        raise HistoryUnavailableError(f"{stream} {subject}: {type(exc).__name__}") from exc
    finally:
        with contextlib.suppress(nats.errors.Error, TimeoutError):
            await js.delete_consumer(stream, name)
    return found
