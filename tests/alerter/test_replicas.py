"""Two alerter replicas on one nats-server: one leads, an alert is notified once, and when the
leader dies the other takes over and goes on evaluating without notifying it again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from nats.js.errors import KeyNotFoundError

from libs.alerting.config import load_config
from libs.backbone.connecting import Bus, connect
from libs.backbone.leasing import Lease
from libs.backbone.natsserver import EmbeddedNats
from libs.backbone.topology import LEASES, ensure_topology
from libs.protocol.telemetry import Heartbeat, health_subject
from services.alerter.app import LEASE_KEY, replica
from services.alerter.core.timing import FakeClock
from services.alerter.handlers import Alerter
from tests.alerter.support import webhook_server
from tests.support.waiting import eventually, polled

# Evaluated every 50 ms of real time; the fake clock decides what is due.
SERVICE_DOWN = """
settings: {evaluation_interval: 50ms}
rules:
  - alert: PaiServiceDown
    expr: pai_service_heartbeat_age_seconds > 30
    labels: {severity: error}
route:
  receiver: ops
  group_by: [alertname, service]
  group_wait: 0s
  group_interval: 1m
  repeat_interval: 1h
receivers:
  - name: ops
    webhook_configs: [{url: "WEBHOOK_URL"}]
"""


@dataclass
class Replica:
    name: str
    bus: Bus
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    built: list[Alerter] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


@asynccontextmanager
async def replicas(
    server: EmbeddedNats, names: list[str], text: str, clock: FakeClock
) -> AsyncIterator[list[Replica]]:
    """A replica per name, each on its own connection, run as `main` runs it."""
    started: list[Replica] = []
    try:
        for name in names:
            bus = await connect(server.url, name=name, initial_timeout=10.0)
            one = Replica(name, bus)

            def build(lease: Lease, one: Replica = one) -> Alerter:
                alerter = Alerter(one.bus, config=load_config(text), clock=clock, lease=lease)
                one.built.append(alerter)
                return alerter

            one.task = asyncio.create_task(replica(bus, name, one.stop, build))
            started.append(one)
        yield started
    finally:
        for one in started:
            one.stop.set()
        await asyncio.gather(*(one.task for one in started if one.task is not None), return_exceptions=True)
        for one in started:
            await one.bus.close()


async def holder(bus: Bus) -> str | None:
    kv = await bus.js.key_value(LEASES.bucket)
    try:
        entry = await kv.get(LEASE_KEY)
    except KeyNotFoundError:
        return None
    return entry.value.decode() if entry.value else None


async def beat(bus: Bus, alerter: Alerter, service: str) -> None:
    seen = alerter.counts["heartbeats"]
    heartbeat = Heartbeat(service=service, instance="test")
    await bus.nc.publish(health_subject(service), heartbeat.model_dump_json().encode())
    await eventually(polled(lambda: alerter.counts["heartbeats"]), lambda n: n > seen)


async def evaluated(alerters: list[Alerter], times: int) -> None:
    """Until every alerter built so far has evaluated `times` more times than now."""
    seen = [alerter.counts["evaluations"] for alerter in alerters]
    await eventually(
        polled(lambda: [a.counts["evaluations"] - s for a, s in zip(alerters, seen, strict=True)]),
        lambda more: all(n >= times for n in more),
    )


async def test_an_alert_is_notified_once_by_two_replicas_and_the_standby_takes_over_from_a_dead_leader(
    nats_server: EmbeddedNats, bus: Bus
) -> None:
    await ensure_topology(bus.js)
    clock = FakeClock()
    async with (
        webhook_server() as (posts, url),
        replicas(
            nats_server, ["alerter-0", "alerter-1"], SERVICE_DOWN.replace("WEBHOOK_URL", url), clock
        ) as (first, second),
    ):
        # One of them leads and has rebuilt (it subscribes to heartbeats once caught up).
        leader_name = await eventually(lambda: holder(bus), lambda name: name is not None)
        leader, standby = (first, second) if leader_name == first.name else (second, first)
        await eventually(polled(lambda: len(leader.built)), lambda n: n == 1)
        await eventually(polled(lambda: leader.built[0].counts["evaluations"]), lambda n: n > 0)
        await beat(bus, leader.built[0], "scheduler")

        clock.advance(31)
        await eventually(polled(lambda: len(posts)), lambda n: n >= 1)
        # Several more evaluations by every alerter there is: still one notification.
        await evaluated([*leader.built, *standby.built], 5)
        assert [(p["status"], p["commonLabels"]["service"]) for p in posts] == [("firing", "scheduler")]
        assert standby.built == []  # the standby has not even rebuilt

        # The leader dies: no clean stop, its lease is not released; it expires and the standby
        # takes over (within the bucket's TTL), rebuilds from what the leader logged and goes
        # on evaluating.
        assert leader.task is not None
        leader.task.cancel()
        await leader.bus.nc.close()
        await asyncio.gather(leader.task, return_exceptions=True)
        await eventually(lambda: holder(bus), lambda name: name == standby.name, within=30)
        await eventually(polled(lambda: len(standby.built)), lambda n: n == 1)
        successor = standby.built[0]
        await eventually(polled(lambda: successor.counts["evaluations"]), lambda n: n > 0)
        await evaluated([successor], 5)
        assert len(posts) == 1  # what the dead leader notified is not notified again

        # ... and it evaluates: a service that goes quiet now is notified, once.
        await beat(bus, successor, "rest")
        clock.advance(31)
        await eventually(polled(lambda: len(posts)), lambda n: n >= 2)
        await evaluated([successor], 5)
        assert [(p["status"], p["commonLabels"]["service"]) for p in posts] == [
            ("firing", "scheduler"),
            ("firing", "rest"),
        ]


async def test_a_leader_whose_lease_was_taken_notifies_nothing_and_stands_by(
    nats_server: EmbeddedNats, bus: Bus
) -> None:
    """A leader paused or cut off past its lease finds out at its next evaluation, before it
    notifies: the lease is renewed before every evaluation."""
    await ensure_topology(bus.js)
    clock = FakeClock()
    async with (
        webhook_server() as (posts, url),
        replicas(nats_server, ["alerter-0"], SERVICE_DOWN.replace("WEBHOOK_URL", url), clock) as (only,),
    ):
        await eventually(polled(lambda: len(only.built)), lambda n: n == 1)
        alerter = only.built[0]
        await eventually(polled(lambda: alerter.counts["evaluations"]), lambda n: n > 0)
        await beat(bus, alerter, "scheduler")
        # Another replica holds the lease now (as after this one's lease expired while it slept).
        kv = await bus.js.key_value(LEASES.bucket)
        await kv.put(LEASE_KEY, b"alerter-9")
        clock.advance(31)
        # Its turn ends: the alerter closes (its HTTP session with it) and the replica stands by.
        await eventually(polled(lambda: alerter._session is not None and alerter._session.closed), bool)
        assert posts == []
        assert await holder(bus) == "alerter-9"
        assert len(only.built) == 1


async def test_what_a_leader_could_not_notify_for_want_of_lease_is_notified_once_by_the_next(
    bus: Bus,
) -> None:
    """A leader that cannot renew its lease for long enough to notify and log it (the bus slow
    or away) notifies nothing and hands over; what it had due is not in the notification log, so
    the next leader sends it, once."""
    await ensure_topology(bus.js)
    clock = FakeClock()
    kv = await bus.js.key_value(LEASES.bucket)
    async with webhook_server() as (posts, url):
        text = SERVICE_DOWN.replace("WEBHOOK_URL", url)
        lease = Lease(kv, LEASE_KEY, "alerter-0")
        assert await lease.acquire(asyncio.Event())
        first = Alerter(bus, config=load_config(text), clock=clock, lease=lease)
        await first.start(asyncio.Event(), watch=False)
        try:
            await beat(bus, first, "scheduler")
            clock.advance(31)

            async def unanswered() -> None:
                raise TimeoutError  # the bus away

            lease.renewed_at -= lease.hold - 1  # renewed 4 s ago: too little left to notify
            lease.confirm = unanswered  # type: ignore[method-assign]
            result = await first.tick()
            assert [n.group_key for n in result.notifications] != []
            assert posts == []
            assert first.handing_over
        finally:
            await first.close()

        second = Alerter(bus, config=load_config(text), clock=clock)
        await second.start(asyncio.Event(), watch=False)
        try:
            assert [n.group_key for n in (await second.tick()).notifications] != []
            await second.tick()
        finally:
            await second.close()
        assert [(p["status"], p["commonLabels"]["service"]) for p in posts] == [("firing", "scheduler")]


async def test_a_notification_whose_record_cannot_be_logged_is_left_to_the_next_leader(bus: Bus) -> None:
    """A notification is logged before it is sent: one whose record the bus does not take (the
    log's group electing a leader) is not sent, and the next leader, which reads the log when it
    starts, sends it once."""
    await ensure_topology(bus.js)
    clock = FakeClock()
    kv = await bus.js.key_value(LEASES.bucket)
    async with webhook_server() as (posts, url):
        text = SERVICE_DOWN.replace("WEBHOOK_URL", url)
        lease = Lease(kv, LEASE_KEY, "alerter-0")
        assert await lease.acquire(asyncio.Event())
        first = Alerter(bus, config=load_config(text), clock=clock, lease=lease)
        await first.start(asyncio.Event(), watch=False)
        try:
            await beat(bus, first, "scheduler")
            clock.advance(31)
            assert first._nflog is not None

            async def unanswered(record: object) -> None:
                lease.renewed_at -= lease.hold  # the lease runs out meanwhile
                raise TimeoutError

            first._nflog.put = unanswered  # type: ignore[method-assign]
            assert [n.group_key for n in (await first.tick()).notifications] != []
            assert posts == []
            assert first.handing_over
        finally:
            first._nflog = None
            await first.close()

        second = Alerter(bus, config=load_config(text), clock=clock)
        await second.start(asyncio.Event(), watch=False)
        try:
            assert [n.group_key for n in (await second.tick()).notifications] != []
            await second.tick()
        finally:
            await second.close()
        assert [(p["status"], p["commonLabels"]["service"]) for p in posts] == [("firing", "scheduler")]
