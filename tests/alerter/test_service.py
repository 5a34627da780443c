"""The alerter on a real nats-server: email, webhook, service-down and stop-job, on a fake clock."""

from __future__ import annotations

import asyncio
import functools
import json
from email import message_from_bytes
from typing import Any

from nats.aio.msg import Msg

from libs.backbone.connecting import Bus
from libs.backbone.heartbeats import beat_forever
from libs.backbone.topology import publish_event
from libs.protocol.events import JobCompleted, JobState, JobSubmitted, decode_event
from libs.protocol.subjects import ALERT_RULES_RPC, ALERTS_RPC, RECENT_ALERTS_RPC
from libs.protocol.telemetry import MetricBatch, MetricSample, metrics_subject
from services.alerter.core.timing import FakeClock
from services.alerter.handlers import Alerter
from tests.alerter.support import running_alerter, smtp_server, webhook_server
from tests.support.jobs import job_model
from tests.support.waiting import eventually


async def _count(alerter: Alerter, what: str) -> int:
    return alerter.counts[what]


NOTIFY = """
rules:
  - alert: JobStatusChanged
    expr: pai_job_status_change{notify="true"} > 0
    labels: {severity: info, type: job_notification}
    annotations: {summary: "job $job_name of $user is $state"}
route:
  receiver: admins
  group_wait: 0s
  routes:
    - match: {type: job_notification}
      receiver: job-owner
      group_by: [job_id, state, attempt]
      group_wait: 0s
      group_interval: 1m
      repeat_interval: 24h
receivers:
  - name: admins
  - name: job-owner
    email_configs:
      - to: "$user@example.org"
        smarthost: "127.0.0.1:SMTP_PORT"
        subject: "[pai] job $job_name $state"
    webhook_configs:
      - url: "WEBHOOK_URL"
"""


async def test_a_failed_job_whose_owner_asked_is_emailed_and_posted_once(bus: Bus) -> None:
    clock = FakeClock()
    async with smtp_server() as (mailbox, port), webhook_server() as (posts, url):
        text = NOTIFY.replace("SMTP_PORT", str(port)).replace("WEBHOOK_URL", url)
        async with running_alerter(bus, text, clock) as alerter:
            notify = {"jobStatusChangeNotification": {"failed": True}}
            submitted = JobSubmitted(
                job_id="j1",
                user="alice",
                name="mnist",
                virtual_cluster="default",
                config=job_model({"extras": notify}),
            )
            await publish_event(bus.js, submitted)
            # The orchestrator, restarted, may publish the completion again under a new id.
            for _ in range(2):
                await publish_event(
                    bus.js, JobCompleted(job_id="j1", attempt=0, state=JobState.FAILED, exit_code=1)
                )
            await eventually(lambda: _count(alerter, "events"), lambda n: n == 3)
            await alerter.tick()
            for _ in range(3):
                clock.advance(120)
                await alerter.tick()
    assert len(mailbox.messages) == 1
    recipients, content = mailbox.messages[0]
    assert recipients == ["alice@example.org"]
    email = message_from_bytes(content)
    assert email["Subject"] == "[pai] job mnist FAILED"
    assert "job mnist of alice is FAILED" in str(email.get_payload())
    assert len(posts) == 1
    assert posts[0]["version"] == "4"
    assert posts[0]["status"] == "firing"
    assert [a["labels"]["job_id"] for a in posts[0]["alerts"]] == ["j1"]


SERVICE_DOWN = """
rules:
  - alert: PaiServiceDown
    expr: pai_service_heartbeat_age_seconds > 30
    labels: {severity: error}
    annotations: {summary: "service $service is silent"}
route: {receiver: ops, group_wait: 0s}
receivers: [{name: ops}]
"""


async def _alerts(bus: Bus, **request: object) -> list[dict[str, Any]]:
    reply = await bus.nc.request(ALERTS_RPC, json.dumps(request).encode(), timeout=5)
    answer: list[dict[str, Any]] = json.loads(reply.data)
    return answer


async def _ask(bus: Bus, subject: str, **request: object) -> Any:
    reply = await bus.nc.request(subject, json.dumps(request).encode(), timeout=5)
    return json.loads(reply.data)


async def test_a_service_whose_heartbeats_stop_is_reported_down_then_up(bus: Bus) -> None:
    clock = FakeClock()
    events: list[Any] = []
    sub = await bus.nc.subscribe("pai.alert.>", cb=functools.partial(_collect, events))
    async with running_alerter(bus, SERVICE_DOWN, clock) as alerter:
        stop_beats = asyncio.Event()
        beats = asyncio.create_task(beat_forever(bus.nc, "scheduler", stop_beats, every=0.05))
        await eventually(lambda: _count(alerter, "heartbeats"), lambda n: n >= 1)
        stop_beats.set()  # the service dies
        await beats
        await bus.nc.flush()
        clock.advance(30)
        assert (await alerter.tick()).fired == []
        clock.advance(1)
        fired = (await alerter.tick()).fired
        assert [a.labels["service"] for a in fired] == ["scheduler"]
        listed = await _alerts(bus, user=None, admin=True)
        assert [a["labels"]["alertname"] for a in listed] == ["PaiServiceDown"]
        assert await _alerts(bus, user="alice", admin=False) == []
        # It comes back.
        seen = alerter.counts["heartbeats"]
        restarted = asyncio.Event()
        beats = asyncio.create_task(beat_forever(bus.nc, "scheduler", restarted, every=0.05))
        await eventually(lambda: _count(alerter, "heartbeats"), lambda n: n > seen)
        resolved = (await alerter.tick()).resolved
        restarted.set()
        await beats
        assert [a.labels["service"] for a in resolved] == ["scheduler"]
        assert await _alerts(bus, user=None, admin=True) == []
        # Resolved, it is listed among the recent alerts with its end, for admins only.
        recent = await _ask(bus, RECENT_ALERTS_RPC, user=None, admin=True, since=clock.now() - 3600)
        assert [(a["labels"]["alertname"], a["status"]) for a in recent] == [("PaiServiceDown", "resolved")]
        assert recent[0]["endsAt"] >= recent[0]["startsAt"] > "2000"
        assert await _ask(bus, RECENT_ALERTS_RPC, user="alice", admin=False, since=0) == []
        assert await _ask(bus, RECENT_ALERTS_RPC, user=None, admin=True, since=clock.now() + 1) == []
        refused = await _ask(bus, RECENT_ALERTS_RPC, admin="yes")
        assert "admin" in refused["error"]
        rules = await _ask(bus, ALERT_RULES_RPC)
        assert rules["source"] == "built-in"
        assert [(r["alert"], r["for"], r["labels"]) for r in rules["rules"]] == [
            ("PaiServiceDown", 0.0, {"severity": "error"})
        ]
    await eventually(lambda: _types(events), lambda kinds: kinds == ["alert.fired", "alert.resolved"])
    await sub.unsubscribe()


async def _collect(events: list[Any], msg: Msg) -> None:
    events.append(decode_event(msg.data))


async def _types(events: list[Any]) -> list[str]:
    return [e.type for e in events]


LOW_UTILISATION = """
rules:
  - alert: JobGpuUnderutilized
    expr: task_gpu_percent < 10
    for: 10m
    labels: {severity: warn}
route: {receiver: reclaim, group_by: [job_id], group_wait: 0s}
receivers:
  - name: reclaim
    actions: [{action: stop_job}]
"""


async def test_a_low_utilisation_rule_with_a_stop_action_stops_the_job(bus: Bus) -> None:
    clock = FakeClock()
    stops: list[Any] = []
    sub = await bus.nc.subscribe("pai.job.*.job.stop_requested", cb=functools.partial(_collect, stops))
    async with running_alerter(bus, LOW_UTILISATION, clock) as alerter:

        async def report(percent: float) -> None:
            sample = MetricSample(
                name="task_gpu_percent", labels={"job_id": "j7", "role": "w", "index": "0"}, value=percent
            )
            seen = alerter.counts["samples"]
            batch = MetricBatch(node="node-1", samples=(sample,))
            await bus.nc.publish(metrics_subject("node-1"), batch.model_dump_json().encode())
            await eventually(lambda: _count(alerter, "samples"), lambda n: n > seen)

        await report(2.0)
        assert (await alerter.tick()).fired == []
        clock.advance(300)
        await report(3.0)
        assert (await alerter.tick()).fired == []
        assert stops == []
        clock.advance(300)
        await report(1.0)
        result = await alerter.tick()
        assert [a.labels["job_id"] for a in result.fired] == ["j7"]
        await eventually(lambda: _types(stops), lambda kinds: kinds == ["job.stop_requested"])
    assert stops[0].job_id == "j7"
    assert stops[0].by == "alerter"
    stored = await bus.js.get_last_msg("PAI_JOBS", "pai.job.j7.job.stop_requested")
    assert decode_event(stored.data or b"").type == "job.stop_requested"
    await sub.unsubscribe()


async def test_an_owner_is_still_told_when_the_alerter_restarted_after_the_submission(bus: Bus) -> None:
    clock = FakeClock()
    notify = {"jobStatusChangeNotification": {"failed": True}}
    submitted = JobSubmitted(
        job_id="j3",
        user="carol",
        name="bert",
        virtual_cluster="default",
        config=job_model({"extras": notify}),
    )
    async with smtp_server() as (mailbox, port), webhook_server() as (_, url):
        text = NOTIFY.replace("SMTP_PORT", str(port)).replace("WEBHOOK_URL", url)
        async with running_alerter(bus, text, clock) as first:
            await publish_event(bus.js, submitted)
            await eventually(lambda: _count(first, "events"), lambda n: n == 1)
        # A new process: its memory is empty and the durable consumer resumes after the submission.
        async with running_alerter(bus, text, clock) as second:
            await publish_event(
                bus.js, JobCompleted(job_id="j3", attempt=0, state=JobState.FAILED, exit_code=1)
            )
            await eventually(lambda: _count(second, "events"), lambda n: n == 1)
            await second.tick()
    assert [rcpt for rcpt, _ in mailbox.messages] == [["carol@example.org"]]
