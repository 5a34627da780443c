"""Publishing stores an event once per Nats-Msg-Id and carries the trace context in headers."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from pydantic import BaseModel

from libs.backbone.connecting import Bus
from libs.backbone.errors import TemporaryError
from libs.backbone.provisioning import StreamSpec, ensure_stream
from libs.backbone.publishing import MSG_ID_HEADER, publish, subject_template


class Submitted(BaseModel):
    job_id: str
    user: str


EVENT = Submitted(job_id="j1", user="alice")


async def test_a_repeated_msg_id_is_stored_once(bus: Bus) -> None:
    await ensure_stream(bus.js, StreamSpec(name="JOBS", subjects=("pai.job.>",)))
    first = await publish(bus.js, "pai.job.j1.submitted", EVENT, msg_id="evt-1")
    again = await publish(bus.js, "pai.job.j1.submitted", EVENT, msg_id="evt-1")
    other = await publish(bus.js, "pai.job.j1.submitted", EVENT, msg_id="evt-2")
    assert not first.duplicate
    assert again.duplicate
    assert again.seq == first.seq
    assert other.seq == first.seq + 1
    info = await bus.js.stream_info("JOBS")
    assert info.state.messages == 2


async def test_the_stored_message_has_the_model_json_the_id_and_a_traceparent(
    bus: Bus, span_exporter: InMemorySpanExporter
) -> None:
    await ensure_stream(bus.js, StreamSpec(name="JOBS", subjects=("pai.job.>",)))
    ack = await publish(bus.js, "pai.job.j1.submitted", EVENT, msg_id="evt-1", headers={"x-user": "alice"})
    stored = await bus.js.get_msg("JOBS", ack.seq)
    assert stored.data is not None
    assert Submitted.model_validate_json(stored.data) == EVENT
    assert stored.headers is not None
    assert stored.headers[MSG_ID_HEADER] == "evt-1"
    assert stored.headers["x-user"] == "alice"
    (span,) = span_exporter.get_finished_spans()
    assert span.kind == SpanKind.PRODUCER
    assert span.name == "send pai.job.*.submitted"
    assert span.attributes is not None
    assert span.attributes["messaging.system"] == "nats"
    assert span.attributes["messaging.message.id"] == "evt-1"
    trace_id = format(span.context.trace_id, "032x")
    span_id = format(span.context.span_id, "016x")
    assert stored.headers["traceparent"].startswith(f"00-{trace_id}-{span_id}-")


async def test_publishing_where_no_stream_listens_is_a_temporary_error(bus: Bus) -> None:
    with pytest.raises(TemporaryError) as caught:
        await publish(bus.js, "nowhere.at.all", EVENT, msg_id="evt-1", ack_timeout=2)
    assert caught.value.delay > 0


@pytest.mark.parametrize(
    ("subject", "template"),
    [
        ("pai.job.abc.submitted", "pai.job.*.submitted"),
        ("pai.node.n1.down", "pai.node.*.down"),
        ("pai.platform", "pai.platform"),
        ("other.x.y.z", "other.x.y.z"),
    ],
)
def test_span_names_hide_ids_in_subjects(subject: str, template: str) -> None:
    assert subject_template(subject) == template
