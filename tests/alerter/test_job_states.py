"""Every state change of a job is told once, in order, however short the job (real nats-server).

A job that ran for two seconds once sent SUCCEEDED but never RUNNING: the alerter looked at
the current states every 15 s, and the job's end had wiped its RUNNING before anyone looked.
Now the alerter follows the job events: it evaluates as a state change arrives, and keeps each
change, so an evaluation that comes late still sees every one. The notification log keeps a
restarted alerter from telling them again.
"""

from __future__ import annotations

import asyncio
from typing import Any

from libs.alerting import load_config
from libs.backbone.connecting import Bus
from libs.backbone.topology import publish_event
from libs.protocol.events import JobCompleted, JobState, JobSubmitted, TaskStarted
from services.alerter.core.timing import FakeClock
from services.alerter.handlers import Alerter
from tests.alerter.support import running_alerter, webhook_server
from tests.support.jobs import job_model
from tests.support.waiting import eventually, polled

# Evaluated once an hour: only the job events themselves can make a notification come sooner.
OWNER_HOOK = """
settings: {evaluation_interval: 1h}
rules:
  - alert: JobStatusChanged
    expr: pai_job_status_change{notify="true"} > 0
    labels: {severity: info, type: job_notification}
    annotations: {summary: "job $job_name of $user is $state"}
route:
  receiver: admins
  routes:
    - match: {type: job_notification}
      receiver: job-owner
      group_by: [job_id, state, attempt]
      group_wait: 0s
      repeat_interval: 24h
receivers:
  - name: admins
  - name: job-owner
    webhook_configs: [{url: "WEBHOOK_URL"}]
"""
NOTIFY = {"jobStatusChangeNotification": {"running": True, "succeeded": True, "failed": True}}


def told(posts: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(status, state) of every alert in every webhook post, in the order they came."""
    return [(post["status"], alert["labels"]["state"]) for post in posts for alert in post["alerts"]]


async def submitted(bus: Bus, job_id: str) -> None:
    job = JobSubmitted(
        job_id=job_id,
        user="alice",
        name="quick",
        virtual_cluster="default",
        config=job_model({"extras": NOTIFY}),
    )
    await publish_event(bus.js, job)


async def started(bus: Bus, job_id: str) -> None:
    await publish_event(bus.js, TaskStarted(job_id=job_id, attempt=0, role="worker", index=0, node="n1"))


async def succeeded(bus: Bus, job_id: str) -> None:
    done = JobCompleted(job_id=job_id, attempt=0, state=JobState.SUCCEEDED, exit_code=0)
    await publish_event(bus.js, done)


async def test_a_two_second_jobs_owner_is_told_running_then_succeeded_as_the_events_come(bus: Bus) -> None:
    clock = FakeClock()
    async with webhook_server() as (posts, url):
        stop = asyncio.Event()
        alerter = Alerter(bus, config=load_config(OWNER_HOOK.replace("WEBHOOK_URL", url)), clock=clock)
        await alerter.start(stop, watch=False)
        try:
            running = asyncio.create_task(alerter.run(stop))
            try:
                await eventually(polled(lambda: alerter.counts["evaluations"]), lambda n: n >= 1)
                await submitted(bus, "j2s")
                await started(bus, "j2s")
                # Told while the job runs, long before the hourly evaluation.
                await eventually(polled(lambda: told(posts)), lambda seen: seen == [("firing", "RUNNING")])
                clock.advance(2)
                await succeeded(bus, "j2s")
                await eventually(
                    polled(lambda: told(posts)),
                    lambda seen: seen == [("firing", "RUNNING"), ("firing", "SUCCEEDED")],
                )
            finally:
                stop.set()
                await running
            # Later evaluations tell neither again.
            for _ in range(3):
                clock.advance(600)
                await alerter.tick()
        finally:
            await alerter.close()
    assert told(posts) == [("firing", "RUNNING"), ("firing", "SUCCEEDED")]


async def test_a_job_that_ends_before_an_evaluation_is_told_both_states_in_order_and_once(bus: Bus) -> None:
    clock = FakeClock()
    async with webhook_server() as (posts, url):
        text = OWNER_HOOK.replace("WEBHOOK_URL", url)
        async with running_alerter(bus, text, clock) as alerter:
            await submitted(bus, "j2s")
            await started(bus, "j2s")
            clock.advance(2)
            await succeeded(bus, "j2s")
            await eventually(polled(lambda: alerter.counts["events"]), lambda n: n == 3)
            clock.advance(13)  # the next evaluation, after the job's end
            await alerter.tick()
            assert told(posts) == [("firing", "RUNNING"), ("firing", "SUCCEEDED")]
            for _ in range(3):
                clock.advance(600)
                await alerter.tick()
        # A restarted alerter rebuilds both changes from the job stream, and tells neither again.
        clock.advance(30)
        async with running_alerter(bus, text, clock) as again:
            assert again.counts["replayed"] == 3
            for _ in range(3):
                await again.tick()
                clock.advance(600)
    assert told(posts) == [("firing", "RUNNING"), ("firing", "SUCCEEDED")]
