"""Restarting the alerter on a real nats-server: nothing said twice, nothing forgotten (fake clock)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from libs.alerting.config import load_config
from libs.backbone.connecting import Bus
from libs.backbone.topology import NOTIFICATION_LOG, publish_event
from libs.protocol.events import JobPending, JobSubmitted
from libs.protocol.subjects import ALERTS_STREAM
from libs.protocol.telemetry import Heartbeat, MetricBatch, MetricSample, health_subject, metrics_subject
from services.alerter.core.timing import FakeClock
from services.alerter.handlers import Alerter
from tests.alerter.support import webhook_server
from tests.support.jobs import job_model
from tests.support.waiting import eventually, polled


@asynccontextmanager
async def running(bus: Bus, text: str, clock: FakeClock, **options: Any) -> AsyncIterator[Alerter]:
    stop = asyncio.Event()
    alerter = Alerter(bus, config=load_config(text), clock=clock, **options)
    await alerter.start(stop, watch=False)
    try:
        yield alerter
    finally:
        stop.set()
        await alerter.close()


async def beat(bus: Bus, alerter: Alerter, service: str) -> None:
    seen = alerter.counts["heartbeats"]
    heartbeat = Heartbeat(service=service, instance="test")
    await bus.nc.publish(health_subject(service), heartbeat.model_dump_json().encode())
    await eventually(polled(lambda: alerter.counts["heartbeats"]), lambda n: n > seen)


async def alert_events(bus: Bus) -> int:
    return (await bus.js.stream_info(ALERTS_STREAM)).state.messages


SERVICE_DOWN = """
rules:
  - alert: PaiServiceDown
    expr: pai_service_heartbeat_age_seconds > 30
    labels: {severity: error}
route:
  receiver: ops
  group_by: [alertname]
  group_wait: 0s
  group_interval: 1m
  repeat_interval: 1h
receivers:
  - name: ops
    webhook_configs: [{url: "WEBHOOK_URL"}]
"""


async def test_a_notified_alert_is_not_notified_again_after_a_restart_but_repeats_and_resolves(
    bus: Bus,
) -> None:
    clock = FakeClock()
    async with webhook_server() as (posts, url):
        text = SERVICE_DOWN.replace("WEBHOOK_URL", url)
        async with running(bus, text, clock) as first:
            await beat(bus, first, "scheduler")
            clock.advance(31)
            assert [a.name for a in (await first.tick()).fired] == ["PaiServiceDown"]
            notified_at = clock.now()
        assert [p["status"] for p in posts] == ["firing"]
        assert await alert_events(bus) == 1
        kv = await bus.js.key_value(NOTIFICATION_LOG.bucket)
        assert len(await kv.keys()) == 1

        clock.advance(30)  # the restart takes a while
        async with running(bus, text, clock) as second:
            result = await second.tick()
            assert result.fired == []
            assert result.notifications == []
            assert [a.name for a in result.restored] == ["PaiServiceDown"]
            while clock.now() + 60 < notified_at + 3600:
                clock.advance(60)
                assert (await second.tick()).notifications == []
            assert len(posts) == 1  # nothing before repeat_interval
            clock.advance(60)
            assert len((await second.tick()).notifications) == 1
            assert [p["status"] for p in posts] == ["firing", "firing"]
            # The service comes back: one resolution, then silence.
            await beat(bus, second, "scheduler")
            assert [a.name for a in (await second.tick()).resolved] == ["PaiServiceDown"]
            for _ in range(3):
                clock.advance(60)
                await beat(bus, second, "scheduler")
                await second.tick()
        assert [p["status"] for p in posts] == ["firing", "firing", "resolved"]
        assert await alert_events(bus) == 2  # one alert.fired, one alert.resolved: none repeated


async def test_a_resolution_is_sent_for_an_alert_that_cleared_while_the_alerter_was_down(bus: Bus) -> None:
    clock = FakeClock()
    async with webhook_server() as (posts, url):
        text = SERVICE_DOWN.replace("WEBHOOK_URL", url)
        async with running(bus, text, clock) as first:
            await beat(bus, first, "rest")
            clock.advance(31)
            await first.tick()
        assert [p["status"] for p in posts] == ["firing"]
        async with running(bus, text, clock) as second:
            await beat(bus, second, "rest")  # it came back while no alerter ran
            clock.advance(second.engine.config.settings.sample_ttl)
            await beat(bus, second, "rest")
            assert [a.name for a in (await second.tick()).resolved] == ["PaiServiceDown"]
    assert [p["status"] for p in posts] == ["firing", "resolved"]


async def test_a_service_silent_since_before_the_restart_fires_at_its_time(bus: Bus) -> None:
    clock = FakeClock()
    async with webhook_server() as (posts, url):
        text = SERVICE_DOWN.replace("WEBHOOK_URL", url)
        async with running(bus, text, clock) as first:
            await beat(bus, first, "orchestrator")
            heard = clock.now()
            clock.advance(2)
            await beat(bus, first, "orchestrator")  # within `remember_every`: stored at close
            heard = clock.now()
        clock.advance(10)
        async with running(bus, text, clock) as second:
            clock.advance(heard + 30 - clock.now())
            assert (await second.tick()).fired == []
            clock.advance(1)
            fired = (await second.tick()).fired
            assert [a.labels["service"] for a in fired] == ["orchestrator"]
    assert [p["status"] for p in posts] == ["firing"]


PENDING = """
rules:
  - alert: PaiJobPending
    expr: pai_job_pending > 0
    for: 30m
    labels: {severity: warn}
route: {receiver: ops, group_by: [job_id], group_wait: 0s}
receivers:
  - name: ops
    webhook_configs: [{url: "WEBHOOK_URL"}]
"""


async def test_a_job_pending_since_before_the_restart_fires_thirty_minutes_after_its_submission(
    bus: Bus,
) -> None:
    clock = FakeClock()
    submitted_at = clock.now()
    submitted = JobSubmitted(
        job_id="j5",
        user="dave",
        name="resnet",
        virtual_cluster="default",
        config=job_model({}),
        occurred_at=datetime.fromtimestamp(submitted_at, UTC),
    )
    async with webhook_server() as (posts, url):
        text = PENDING.replace("WEBHOOK_URL", url)
        async with running(bus, text, clock) as first:
            await publish_event(bus.js, submitted)
            await eventually(polled(lambda: first.counts["events"]), lambda n: n == 1)
            clock.advance(600)
            assert (await first.tick()).fired == []
        clock.advance(600)  # down for ten minutes
        async with running(bus, text, clock) as second:
            assert second.counts["replayed"] == 1
            assert (await second.tick()).fired == []
            await publish_event(bus.js, JobPending(job_id="j5", reason="no free GPU"))
            await eventually(polled(lambda: second.counts["events"]), lambda n: n == 1)
            clock.advance(submitted_at + 1800 - 1 - clock.now())
            assert (await second.tick()).fired == []
            clock.advance(1)
            fired = (await second.tick()).fired
            assert [(a.name, a.labels["user"], a.labels["job_name"]) for a in fired] == [
                ("PaiJobPending", "dave", "resnet")
            ]
    assert [(p["status"], p["alerts"][0]["labels"]["job_id"]) for p in posts] == [("firing", "j5")]


LOW_UTILISATION = """
settings: {sample_ttl: 1h}
rules:
  - alert: JobGpuUnderutilized
    expr: task_gpu_percent < 10
    for: 10m
route: {receiver: reclaim, group_by: [job_id], group_wait: 0s, group_interval: 1m, repeat_interval: 30m}
receivers:
  - name: reclaim
    actions: [{action: stop_job}, {action: tag_job, tag: idle}]
"""


class RecordingActions:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def stop_job(self, job_id: str, *, alert_id: str, reason: str) -> None:
        self.calls.append(("stop", job_id))

    async def tag_job(self, job_id: str, tag: str, *, alert_id: str) -> None:
        self.calls.append((f"tag {tag}", job_id))

    async def cordon_node(self, node_name: str, *, alert_id: str, reason: str) -> None:
        self.calls.append(("cordon", node_name))


async def test_actions_run_once_per_alert_across_repeats_and_restarts(bus: Bus) -> None:
    clock = FakeClock()
    actions = RecordingActions()

    async def report(alerter: Alerter) -> None:
        sample = MetricSample(name="task_gpu_percent", labels={"job_id": "j9"}, value=1.0)
        seen = alerter.counts["samples"]
        batch = MetricBatch(node="node-1", samples=(sample,))
        await bus.nc.publish(metrics_subject("node-1"), batch.model_dump_json().encode())
        await eventually(polled(lambda: alerter.counts["samples"]), lambda n: n > seen)

    async with running(bus, LOW_UTILISATION, clock, actions=actions) as first:
        await report(first)
        await first.tick()
        clock.advance(600)
        await report(first)
        assert len((await first.tick()).fired) == 1
        assert actions.calls == [("stop", "j9"), ("tag idle", "j9")]
        clock.advance(1800)  # a repeat: notified again, not acted on again
        await report(first)
        assert len((await first.tick()).notifications) == 1
    async with running(bus, LOW_UTILISATION, clock, actions=actions) as second:
        for _ in range(40):  # past the next repeat
            clock.advance(60)
            await report(second)
            result = await second.tick()
            assert result.fired == []
    assert actions.calls == [("stop", "j9"), ("tag idle", "j9")]


async def test_closing_while_the_rules_watch_opens_does_not_hang(bus: Bus) -> None:
    for _ in range(5):
        stop = asyncio.Event()
        alerter = Alerter(bus, clock=FakeClock())
        await alerter.start(stop)
        stop.set()
        await asyncio.wait_for(alerter.close(), 10)
        watch = alerter._watch
        assert watch is not None
        assert watch.done()
        assert not watch.cancelled()  # ended by stopping the watcher, not by a cancel
