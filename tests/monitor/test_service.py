"""The monitor on a real nats-server: node.lost on a fake clock, heartbeats, task metrics, /metrics."""

from __future__ import annotations

import asyncio
import functools
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from nats.aio.msg import Msg

from libs.backbone.connecting import Bus
from libs.backbone.heartbeats import beat_forever
from libs.backbone.topology import ensure_topology, publish_event
from libs.protocol.events import JobSubmitted, NodeReported, TaskStarted, decode_event
from libs.protocol.subjects import JOBS_STREAM
from libs.protocol.telemetry import METRICS_SUBJECTS, MetricBatch
from services.alerter.core.timing import FakeClock
from services.monitor.handlers import Monitor
from services.monitor.settings import MonitorSettings
from tests.support.jobs import job_model
from tests.support.waiting import eventually


@pytest.fixture
async def monitor(bus: Bus) -> AsyncIterator[tuple[Monitor, FakeClock]]:
    clock = FakeClock(start=time.time())
    settings = MonitorSettings(node_name="node-a", metrics_port=0, node_lost_after=60)
    await ensure_topology(bus.js)
    running = Monitor(bus, settings, clock=clock.now)
    await running.start()
    try:
        yield running, clock
    finally:
        await running.close()


async def _count(monitor: Monitor, what: str) -> int:
    return monitor.counts[what]


async def _collect(into: list[Any], msg: Msg) -> None:
    into.append(msg)


async def test_a_node_that_stops_reporting_is_declared_lost_once(
    bus: Bus, monitor: tuple[Monitor, FakeClock]
) -> None:
    running, clock = monitor
    lost: list[Msg] = []
    sub = await bus.nc.subscribe("pai.node.*.node.lost", cb=functools.partial(_collect, lost))
    report = NodeReported(node_id="n2", name="10.0.0.2", address="10.0.0.2", cpu=8, memory_mb=4096, gpus=0)
    await publish_event(bus.js, report)
    await eventually(lambda: _count(running, "node_events"), lambda n: n >= 1)
    clock.advance(60)
    assert await running.check_liveness() == []
    clock.advance(1.5)
    published = await running.check_liveness()
    assert [e.name for e in published] == ["10.0.0.2"]
    assert await running.check_liveness() == []
    await eventually(lambda: _len(lost), lambda n: n == 1)
    event = decode_event(lost[0].data)
    assert event.type == "node.lost"
    await sub.unsubscribe()


async def _len(items: list[Any]) -> int:
    return len(items)


async def test_task_metrics_are_published_and_served_to_prometheus(
    bus: Bus, monitor: tuple[Monitor, FakeClock]
) -> None:
    running, _ = monitor
    batches: list[Msg] = []
    sub = await bus.nc.subscribe(METRICS_SUBJECTS, cb=functools.partial(_collect, batches))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import time; time.sleep(60)", start_new_session=True
    )
    stop_beats = asyncio.Event()
    beats = asyncio.create_task(beat_forever(bus.nc, "rest", stop_beats, every=0.05))
    try:
        started = TaskStarted(
            job_id="job9", attempt=0, role="trainer", index=0, node="node-a", pid=process.pid
        )
        # A submission comes first on the stream, but the monitor follows task events only.
        await publish_event(
            bus.js,
            JobSubmitted(
                job_id="job9", user="alice", name="j9", virtual_cluster="default", config=job_model({})
            ),
        )
        await publish_event(bus.js, started)
        await eventually(lambda: _count(running, "job_events"), lambda n: n >= 1)
        assert await _count(running, "job_events") == 1
        # ... because the server delivers it nothing else: its consumer filters by event type.
        followers = [info.config for info in await bus.js.consumers_info(JOBS_STREAM)]
        assert [sorted(c.filter_subjects or [c.filter_subject or ""]) for c in followers] == [
            [
                "pai.job.*.job.completed",
                "pai.job.*.job.scheduled",
                "pai.job.*.task.completed",
                "pai.job.*.task.started",
            ]
        ]
        await eventually(lambda: _count(running, "heartbeats"), lambda n: n >= 1)
        samples = await running.sample_once()
        assert any(s.name == "task_mem_usage_byte" and s.labels["job_id"] == "job9" for s in samples)
        await eventually(lambda: _len(batches), lambda n: n >= 1)
        batch = MetricBatch.model_validate_json(batches[0].data)
        assert batch.node == "node-a"
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{running.port}/metrics") as reply,
        ):
            text = await reply.text()
        assert 'task_mem_usage_byte{index="0",job_id="job9",node_name="node-a",role="trainer"}' in text
        assert 'pai_service_up{service="rest"} 1.0' in text
        assert "node_memory_usage_percent" in text
    finally:
        stop_beats.set()
        await beats
        process.kill()
        await process.wait()
        await sub.unsubscribe()


async def test_a_message_that_does_not_decode_is_dropped_with_a_line_saying_so(
    bus: Bus, monitor: tuple[Monitor, FakeClock], caplog: pytest.LogCaptureFixture
) -> None:
    async def dropped() -> list[str]:
        return [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]

    await bus.nc.publish("pai.metrics.node-x", b"not a batch")
    await bus.nc.publish("pai.health.ghost", b"{}")
    lines = await eventually(dropped, lambda found: len(found) >= 2)
    assert any("undecodable metrics dropped" in line and "pai.metrics.node-x" in line for line in lines)
    assert any("undecodable heartbeat dropped" in line and "pai.health.ghost" in line for line in lines)
