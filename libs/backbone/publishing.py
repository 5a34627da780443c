"""Publishing one event to JetStream: deduplicated, traced, and retryable by type.

Every event carries ``Nats-Msg-Id`` (the event's own id), so a publisher that retries after a
timeout, or a service that re-publishes after a crash, stores the event once within the
stream's duplicate window. The W3C trace context goes into the headers so the consumer's span
joins the publisher's trace. Failures that a retry may cure come out as ``TemporaryError``.
"""

from __future__ import annotations

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import PubAck
from opentelemetry.trace import SpanKind, Status, StatusCode
from pydantic import BaseModel

from libs.backbone.errors import TemporaryError
from libs.backbone.tracing import inject_headers, message_span

MSG_ID_HEADER = "Nats-Msg-Id"
CONTENT_TYPE = "application/json"
# Delay suggested to callers that retry a publish that timed out or found no stream.
RETRY_DELAY = 1.0
# The publish may or may not be stored; a retry with the same Nats-Msg-Id settles it.
_UNCONFIRMED = (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError)
NOT_SENT: tuple[type[Exception], ...] = (TemporaryError, nats.errors.Error, TimeoutError, OSError)
"""What a publish raises while the bus is away or has not confirmed it: sending the same event
again (same Nats-Msg-Id) settles it. Anything else is a bug in what is sent, which no retry cures."""


def subject_template(subject: str) -> str:
    """A low-cardinality span name for a subject: ``pai.job.<uid>.submitted`` -> ``pai.job.*.submitted``."""
    tokens = subject.split(".")
    if len(tokens) >= 4 and tokens[0] == "pai":
        tokens[2] = "*"
    return ".".join(tokens)


def messaging_attributes(subject: str, msg_id: str | None, size: int) -> dict[str, str | int]:
    """OpenTelemetry messaging attributes shared by the publish and process spans."""
    attributes: dict[str, str | int] = {
        "messaging.system": "nats",
        "messaging.destination.name": subject,
        "messaging.message.body.size": size,
    }
    if msg_id:
        attributes["messaging.message.id"] = msg_id
    return attributes


async def publish_bytes(
    js: JetStreamContext,
    subject: str,
    payload: bytes,
    *,
    msg_id: str,
    headers: dict[str, str] | None = None,
    ack_timeout: float | None = None,
) -> PubAck:
    """Publish raw bytes the way :func:`publish` does (for payloads that are not models)."""
    attributes = messaging_attributes(subject, msg_id, len(payload))
    attributes["messaging.operation.type"] = "send"
    with message_span(
        f"send {subject_template(subject)}", kind=SpanKind.PRODUCER, attributes=attributes
    ) as span:
        # Injected inside the span so the consumer becomes this span's child.
        all_headers = inject_headers({"Content-Type": CONTENT_TYPE, **(headers or {}), MSG_ID_HEADER: msg_id})
        try:
            ack = await js.publish(subject, payload, timeout=ack_timeout, headers=all_headers)
        except _UNCONFIRMED as exc:
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise TemporaryError(
                f"publish to {subject} not confirmed ({type(exc).__name__})", delay=RETRY_DELAY
            ) from exc
        except nats.js.errors.ServiceUnavailableError as exc:
            span.set_status(Status(StatusCode.ERROR, "service unavailable"))
            raise TemporaryError(f"JetStream unavailable for {subject}", delay=RETRY_DELAY) from exc
        if ack.duplicate:
            span.set_attribute("messaging.nats.duplicate", True)
        span.set_attribute("messaging.nats.stream", ack.stream)
        span.set_attribute("messaging.nats.sequence", ack.seq)
        return ack


async def publish(
    js: JetStreamContext,
    subject: str,
    model: BaseModel,
    *,
    msg_id: str,
    headers: dict[str, str] | None = None,
    ack_timeout: float | None = None,
) -> PubAck:
    """Publish ``model`` as JSON on ``subject`` and wait for the stream's acknowledgement.

    Returns the ``PubAck`` (``ack.duplicate`` is True when the id was seen within the duplicate
    window). Raises ``TemporaryError`` when the publish was not confirmed; retrying with the
    same ``msg_id`` is then safe.
    """
    payload = model.model_dump_json().encode()
    return await publish_bytes(js, subject, payload, msg_id=msg_id, headers=headers, ack_timeout=ack_timeout)
