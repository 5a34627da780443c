"""A new engine continuing from what the last one left: notification log, firing alerts, history."""

from __future__ import annotations

from datetime import UTC, datetime

from libs.alerting.config import load_config
from libs.protocol.events import JobPending, JobSubmitted
from services.alerter.core.engine import AlertEngine
from services.alerter.core.timing import FakeClock
from tests.support.jobs import job_model

SERVICE_DOWN = """
rules:
  - alert: PaiServiceDown
    expr: pai_service_heartbeat_age_seconds > 30
route: {receiver: ops, group_by: [alertname], group_wait: 10s, group_interval: 1m, repeat_interval: 1h}
receivers: [{name: ops}]
"""


def _down_and_notified(clock: FakeClock) -> AlertEngine:
    """An engine that has told `ops` the scheduler is down (heard last at the clock's start)."""
    engine = AlertEngine(load_config(SERVICE_DOWN))
    engine.heartbeat("scheduler", clock.now())
    assert len(engine.step(clock.advance(31)).fired) == 1
    assert [n.status for n in engine.step(clock.advance(10)).notifications] == ["firing"]
    return engine


def _successor(before: AlertEngine, clock: FakeClock, *, heard: float | None) -> AlertEngine:
    """What a restarted service builds: the stored records, the firing alerts, the last heartbeat."""
    after = AlertEngine(load_config(SERVICE_DOWN))
    if heard is not None:
        after.heartbeat("scheduler", heard)
    after.restore(
        records=list(before.dispatcher.records.values()),
        firing=before.evaluator.firing(),
        now=clock.now(),
    )
    return after


def test_a_group_continued_from_its_record_repeats_only_at_repeat_interval_after_the_record() -> None:
    clock = FakeClock()
    before = _down_and_notified(clock)
    notified_at = clock.now()
    after = _successor(before, clock, heard=notified_at - 41)
    first = after.step(clock.advance(5))
    assert first.fired == []
    assert first.notifications == []
    assert [a.name for a in first.restored] == ["PaiServiceDown"]
    while clock.now() + 60 < notified_at + 3600:
        assert after.step(clock.advance(60)).notifications == []
    clock.advance(notified_at + 3600 - clock.now())
    repeated = []
    for _ in range(2):  # the repeat comes at the first flush at or after the hour
        repeated += after.step(clock.now()).notifications
        clock.advance(60)
    assert [(n.status, len(n.firing), n.fresh) for n in repeated] == [("firing", 1, ())]


def test_an_alert_notified_before_the_restart_is_notified_resolved_when_it_clears() -> None:
    clock = FakeClock()
    before = _down_and_notified(clock)
    after = _successor(before, clock, heard=clock.now() - 41)
    after.step(clock.advance(1))
    after.heartbeat("scheduler", clock.now())
    result = after.step(clock.advance(1))
    assert [a.name for a in result.resolved] == ["PaiServiceDown"]
    sent = after.step(clock.advance(10)).notifications
    assert [(n.status, [a.name for a in n.resolved]) for n in sent] == [("resolved", ["PaiServiceDown"])]


def test_an_alert_that_cleared_while_no_engine_ran_resolves_after_the_grace() -> None:
    clock = FakeClock()
    before = _down_and_notified(clock)
    clock.advance(300)
    after = _successor(before, clock, heard=clock.now())  # it came back during the restart
    grace = after.config.settings.sample_ttl
    after.heartbeat("scheduler", clock.advance(grace - 1))
    assert after.step(clock.now()).resolved == []  # samples may still be on their way
    after.heartbeat("scheduler", clock.advance(1))
    resolved = after.step(clock.now()).resolved
    assert [a.name for a in resolved] == ["PaiServiceDown"]
    sent = after.step(clock.advance(10)).notifications
    assert [n.status for n in sent] == ["resolved"]


def test_without_records_a_new_engine_would_notify_again() -> None:
    """The control: the log is what prevents the second notification."""
    clock = FakeClock()
    _down_and_notified(clock)
    fresh = AlertEngine(load_config(SERVICE_DOWN))
    fresh.heartbeat("scheduler", clock.now() - 41)
    fresh.step(clock.advance(1))
    assert [n.status for n in fresh.step(clock.advance(10)).notifications] == ["firing"]


def test_a_notification_names_only_the_alerts_it_tells_of_for_the_first_time() -> None:
    clock = FakeClock()
    engine = AlertEngine(load_config(SERVICE_DOWN))
    engine.heartbeat("scheduler", clock.now())
    engine.step(clock.advance(31))
    first = engine.step(clock.advance(10)).notifications
    assert [[a.labels["service"] for a in n.fresh] for n in first] == [["scheduler"]]
    engine.heartbeat("rest", clock.now())
    engine.step(clock.advance(31))
    second = engine.step(clock.advance(60)).notifications
    assert [sorted(a.labels["service"] for a in n.firing) for n in second] == [["rest", "scheduler"]]
    assert [[a.labels["service"] for a in n.fresh] for n in second] == [["rest"]]
    record = second[0].record
    assert record is not None
    assert len(record.firing) == 2
    assert record.sent_at == clock.now()


PENDING = "rules: [{alert: PaiJobPending, expr: 'pai_job_pending > 0', for: 30m}]\n"


def test_a_job_replayed_from_history_is_pending_since_its_submission() -> None:
    clock = FakeClock()
    submitted_at = clock.now()
    submitted = JobSubmitted(
        job_id="j1",
        user="alice",
        name="train",
        virtual_cluster="default",
        config=job_model({}),
        occurred_at=datetime.fromtimestamp(submitted_at, UTC),
    )
    engine = AlertEngine(load_config(PENDING))
    clock.advance(20 * 60)  # the restart happens 20 minutes later
    engine.observe(submitted, submitted_at, replayed=True)
    engine.observe(JobPending(job_id="j1", reason="no free GPU"), submitted_at + 60, replayed=True)
    assert engine.step(clock.now()).fired == []
    engine.observe(JobPending(job_id="j1", reason="quota"), clock.advance(300))  # live again
    assert engine.step(clock.advance(299)).fired == []
    fired = engine.step(clock.advance(1)).fired
    assert [(a.name, a.labels["user"], a.starts_at) for a in fired] == [
        ("PaiJobPending", "alice", submitted_at)
    ]
