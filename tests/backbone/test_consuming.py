"""The consume loop turns handler outcomes into ack, nak with delay and term, and keeps going."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter

import pytest
import structlog
import structlog.testing
from nats.aio.msg import Msg
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from pydantic import BaseModel

from libs.backbone.connecting import Bus
from libs.backbone.consuming import by_job_id, consume, job_id_of
from libs.backbone.errors import PermanentError, TemporaryError
from libs.backbone.provisioning import ConsumerSpec, StreamSpec, ensure_consumer, ensure_stream
from libs.backbone.publishing import MSG_ID_HEADER, publish
from libs.backbone.tracing import get_tracer
from tests.support.consumers import running_consumer
from tests.support.waiting import eventually


class Event(BaseModel):
    n: int


async def provision(bus: Bus, *, ack_wait: float = 30.0) -> None:
    await ensure_stream(bus.js, StreamSpec(name="JOBS", subjects=("pai.job.>",)))
    await ensure_consumer(bus.js, ConsumerSpec(stream="JOBS", durable="worker", ack_wait=ack_wait))


async def settled(bus: Bus) -> None:
    """Wait until the consumer has nothing delivered-but-unacknowledged and nothing pending."""
    await bus.nc.flush()
    await eventually(
        lambda: bus.js.consumer_info("JOBS", "worker"),
        lambda info: info.num_ack_pending == 0 and info.num_pending == 0,
    )


def msg_id(msg: Msg) -> str:
    return (msg.headers or {})[MSG_ID_HEADER]


async def test_a_temporary_error_redelivers_the_message_after_its_delay(bus: Bus) -> None:
    await provision(bus)
    seen: list[tuple[float, int]] = []
    done = asyncio.Event()

    async def handler(msg: Msg) -> None:
        seen.append((time.monotonic(), msg.metadata.num_delivered))
        if len(seen) == 1:
            raise TemporaryError("cluster busy", delay=0.4)
        done.set()

    async with running_consumer(bus.js, "JOBS", "worker", handler):
        await publish(bus.js, "pai.job.j1.submitted", Event(n=1), msg_id="e1")
        await asyncio.wait_for(done.wait(), 20)
    (first, first_count), (second, second_count) = seen
    assert (first_count, second_count) == (1, 2)
    assert second - first >= 0.35  # redelivered no sooner than the requested delay
    await settled(bus)


async def test_a_permanent_error_terminates_the_message(bus: Bus) -> None:
    await provision(bus, ack_wait=1.0)
    terminated = await bus.nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.JOBS.worker")
    calls = Counter[str]()

    async def handler(msg: Msg) -> None:
        calls[msg_id(msg)] += 1
        raise PermanentError("the job names a virtual cluster that does not exist")

    async with running_consumer(bus.js, "JOBS", "worker", handler):
        await publish(bus.js, "pai.job.j1.submitted", Event(n=1), msg_id="e1")
        advisory = await terminated.next_msg(timeout=20)
    assert json.loads(advisory.data)["stream_seq"] == 1
    await settled(bus)
    info = await bus.js.consumer_info("JOBS", "worker")
    assert info.num_redelivered == 0
    assert calls == {"e1": 1}
    await terminated.unsubscribe()


async def test_an_undecodable_message_is_terminated_not_retried(bus: Bus) -> None:
    await provision(bus)
    terminated = await bus.nc.subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.JOBS.worker")
    calls = Counter[str]()

    async def handler(msg: Msg) -> None:
        calls[msg_id(msg)] += 1
        Event.model_validate_json(msg.data)

    async with running_consumer(bus.js, "JOBS", "worker", handler):
        await bus.js.publish("pai.job.j1.submitted", b"not json", headers={MSG_ID_HEADER: "bad"})
        advisory = await terminated.next_msg(timeout=20)
    assert json.loads(advisory.data)["stream_seq"] == 1
    await settled(bus)
    info = await bus.js.consumer_info("JOBS", "worker")
    assert info.num_redelivered == 0
    assert calls == {"bad": 1}  # handled once: terminated, never handed to the handler again
    await terminated.unsubscribe()


async def test_an_unexpected_exception_naks_and_the_loop_goes_on(bus: Bus) -> None:
    await provision(bus)
    order: list[tuple[str, int]] = []
    both_done = asyncio.Event()

    async def handler(msg: Msg) -> None:
        order.append((msg_id(msg), msg.metadata.num_delivered))
        if msg_id(msg) == "e1" and msg.metadata.num_delivered == 1:
            raise RuntimeError("a bug that goes away on retry")
        if {m for m, _ in order} == {"e1", "e2"} and order[-1] == ("e1", 2):
            both_done.set()

    async with running_consumer(bus.js, "JOBS", "worker", handler):
        await publish(bus.js, "pai.job.j1.submitted", Event(n=1), msg_id="e1")
        await publish(bus.js, "pai.job.j2.submitted", Event(n=2), msg_id="e2")
        await asyncio.wait_for(both_done.wait(), 20)
    # e2 was handled while e1 waited for its retry: the failure did not block the loop.
    assert order == [("e1", 1), ("e2", 1), ("e1", 2)]
    await settled(bus)


async def test_the_trace_travels_from_publisher_to_the_consumer_span(
    bus: Bus, span_exporter: InMemorySpanExporter
) -> None:
    await provision(bus)
    handled = asyncio.Event()

    async def handler(msg: Msg) -> None:
        handled.set()

    with get_tracer().start_as_current_span("submit job") as parent:
        trace_id = parent.get_span_context().trace_id
        await publish(bus.js, "pai.job.j1.submitted", Event(n=1), msg_id="e1")
    async with running_consumer(bus.js, "JOBS", "worker", handler):
        await asyncio.wait_for(handled.wait(), 20)
    spans = {span.name: span for span in span_exporter.get_finished_spans()}
    producer = spans["send pai.job.*.submitted"]
    consumer = spans["process pai.job.*.submitted"]
    assert consumer.kind == SpanKind.CONSUMER
    assert consumer.context.trace_id == producer.context.trace_id == trace_id
    assert consumer.parent is not None
    assert consumer.parent.span_id == producer.context.span_id
    assert consumer.attributes is not None
    assert consumer.attributes["pai.outcome"] == "acked"


async def test_in_progress_keeps_a_slow_message_from_being_redelivered(bus: Bus) -> None:
    ack_wait = 0.5
    await provision(bus, ack_wait=ack_wait)
    progress = await bus.nc.subscribe("$JS.ACK.JOBS.worker.>")
    deliveries = Counter[int]()

    async def slow_handler(msg: Msg) -> None:
        deliveries[msg.metadata.num_delivered] += 1
        started = time.monotonic()
        # Work until the loop has told the server "still working" for twice the ack wait.
        while time.monotonic() - started < 2 * ack_wait:
            ack = await progress.next_msg(timeout=10)
            assert ack.data == b"+WPI"

    # keyed: the loop keeps fetching meanwhile, so a redelivery would reach the handler.
    async with running_consumer(bus.js, "JOBS", "worker", slow_handler, in_progress_every=0.1, key=by_job_id):
        await publish(bus.js, "pai.job.j1.submitted", Event(n=1), msg_id="e1")
        await settled(bus)
    info = await bus.js.consumer_info("JOBS", "worker")
    assert info.num_redelivered == 0
    assert deliveries == {1: 1}
    await progress.unsubscribe()


async def test_without_in_progress_the_same_slow_message_is_redelivered(bus: Bus) -> None:
    """The control for the test above: its ack wait really is short enough to expire."""
    await provision(bus, ack_wait=0.5)
    redelivered = asyncio.Event()
    calls = 0

    async def slow_handler(msg: Msg) -> None:
        nonlocal calls
        calls += 1
        if msg.metadata.num_delivered > 1:
            redelivered.set()

    def per_delivery(msg: Msg) -> str:
        # A redelivery gets its own key so it can run while the first delivery still blocks.
        return str(msg.metadata.num_delivered)

    async def first_blocks(msg: Msg) -> None:
        await slow_handler(msg)
        if msg.metadata.num_delivered == 1:
            await redelivered.wait()

    async with running_consumer(
        bus.js,
        "JOBS",
        "worker",
        first_blocks,
        in_progress_every=3600,
        key=per_delivery,
    ):
        await publish(bus.js, "pai.job.j1.submitted", Event(n=1), msg_id="e1")
        await asyncio.wait_for(redelivered.wait(), 20)
    assert calls == 2


async def test_stop_lets_in_flight_work_finish_and_fetches_nothing_more(bus: Bus) -> None:
    await provision(bus)
    started, release = asyncio.Event(), asyncio.Event()
    log: list[str] = []

    async def handler(msg: Msg) -> None:
        log.append(f"start {msg_id(msg)}")
        started.set()
        await release.wait()
        log.append(f"end {msg_id(msg)}")

    async with running_consumer(bus.js, "JOBS", "worker", handler) as consumer:
        await publish(bus.js, "pai.job.j1.submitted", Event(n=1), msg_id="e1")
        await asyncio.wait_for(started.wait(), 20)
        consumer.stop.set()
        await publish(bus.js, "pai.job.j1.started", Event(n=2), msg_id="e2")
        assert not consumer.task.done()
        release.set()
        await asyncio.wait_for(consumer.task, 20)
    assert log == ["start e1", "end e1"]
    await bus.nc.flush()
    info = await eventually(
        lambda: bus.js.consumer_info("JOBS", "worker"), lambda i: i.ack_floor.stream_seq == 1
    )
    assert info.num_pending == 1  # e2 waits for the next run
    assert info.num_ack_pending == 0


async def test_keyed_consumption_orders_per_job_and_overlaps_jobs(bus: Bus) -> None:
    await provision(bus)
    handled: dict[str, list[int]] = {"a": [], "b": []}
    b_done = asyncio.Event()
    a_may_finish = asyncio.Event()
    all_done = asyncio.Event()

    async def handler(msg: Msg) -> None:
        job = job_id_of(msg.subject)
        assert job is not None
        event = Event.model_validate_json(msg.data)
        if job == "a" and event.n == 0:
            # Job a's first event waits for job b to finish all of its events.
            await asyncio.wait_for(a_may_finish.wait(), 20)
        handled[job].append(event.n)
        if job == "b" and len(handled["b"]) == 5:
            b_done.set()
            a_may_finish.set()
        if len(handled["a"]) == 5 and len(handled["b"]) == 5:
            all_done.set()

    async with running_consumer(bus.js, "JOBS", "worker", handler, key=by_job_id, batch=20):
        for n in range(5):
            await publish(bus.js, f"pai.job.a.e{n}", Event(n=n), msg_id=f"a{n}")
            await publish(bus.js, f"pai.job.b.e{n}", Event(n=n), msg_id=f"b{n}")
        await asyncio.wait_for(all_done.wait(), 20)
    assert handled == {"a": [0, 1, 2, 3, 4], "b": [0, 1, 2, 3, 4]}
    await settled(bus)


async def test_consuming_a_consumer_that_does_not_exist_says_how_to_fix_it(bus: Bus) -> None:
    await ensure_stream(bus.js, StreamSpec(name="JOBS", subjects=("pai.job.>",)))

    async def handler(msg: Msg) -> None:
        return None

    with pytest.raises(ValueError, match="ensure_consumer"):
        await consume(bus.js, "JOBS", "missing", handler, stop=asyncio.Event())


async def test_the_loop_ends_when_the_bus_is_closed(bus: Bus) -> None:
    await provision(bus)
    handled = asyncio.Event()

    async def handler(msg: Msg) -> None:
        handled.set()

    async with running_consumer(bus.js, "JOBS", "worker", handler) as consumer:
        await publish(bus.js, "pai.job.j1.submitted", Event(n=1), msg_id="e1")
        await asyncio.wait_for(handled.wait(), 20)
        await bus.close()
        await asyncio.wait_for(consumer.task, 20)
    assert consumer.task.exception() is None


async def test_each_handled_message_logs_one_line_with_its_job_and_message_ids(bus: Bus) -> None:
    await provision(bus)
    handled = asyncio.Event()

    async def handler(msg: Msg) -> None:
        structlog.get_logger().info("inside handler")
        handled.set()

    with structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        async with running_consumer(bus.js, "JOBS", "worker", handler):
            await publish(bus.js, "pai.job.j7.submitted", Event(n=1), msg_id="e7")
            await asyncio.wait_for(handled.wait(), 20)
    inside = next(entry for entry in logs if entry["event"] == "inside handler")
    (line,) = (entry for entry in logs if entry["event"] == "message handled")
    for entry in (inside, line):
        assert (entry["job_id"], entry["msg_id"]) == ("j7", "e7")
    assert line["outcome"] == "acked"
    assert line["subject"] == "pai.job.j7.submitted"
    assert line["log_level"] == "debug"  # routine: acked in good time


@pytest.mark.parametrize("case", ["terminated", "slow"])
async def test_a_message_not_acked_or_slow_to_ack_logs_its_line_at_info(
    bus: Bus, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await provision(bus)
    handled = asyncio.Event()

    async def handler(msg: Msg) -> None:
        handled.set()
        if case == "terminated":
            raise PermanentError("not for us")

    if case == "slow":
        monkeypatch.setattr("libs.backbone.consuming.SLOW_HANDLING_SECONDS", 0.0)
    with structlog.testing.capture_logs() as logs:
        async with running_consumer(bus.js, "JOBS", "worker", handler):
            await publish(bus.js, "pai.job.j8.submitted", Event(n=1), msg_id="e8")
            await asyncio.wait_for(handled.wait(), 20)
    (line,) = (entry for entry in logs if entry["event"] == "message handled")
    assert line["log_level"] == "info"
    assert line["outcome"] == ("terminated" if case == "terminated" else "acked")
