"""The alert engine on a fake clock: `for` durations, grouping, repeats, inhibition, notifications."""

from __future__ import annotations

from libs.alerting.config import load_config
from libs.protocol.events import (
    JobCompleted,
    JobPending,
    JobScheduled,
    JobState,
    JobSubmitted,
    NodeReported,
    TaskStarted,
)
from services.alerter.core.engine import AlertEngine
from services.alerter.core.timing import FakeClock
from tests.support.jobs import job_model

SERVICE_DOWN = """
rules:
  - alert: PaiServiceDown
    expr: pai_service_heartbeat_age_seconds > 30
    labels: {severity: error}
    annotations: {summary: "service $service silent"}
route: {receiver: ops, group_by: [alertname], group_wait: 10s, group_interval: 1m, repeat_interval: 1h}
receivers: [{name: ops}]
"""


def test_a_silent_service_fires_after_its_threshold_and_resolves_when_it_returns() -> None:
    clock = FakeClock()
    engine = AlertEngine(load_config(SERVICE_DOWN))
    engine.heartbeat("scheduler", clock.now())
    assert engine.step(clock.advance(30)).fired == []
    result = engine.step(clock.advance(1))
    assert [a.labels["service"] for a in result.fired] == ["scheduler"]
    assert result.notifications == []  # group_wait gathers company first
    notified = engine.step(clock.advance(10)).notifications
    assert [n.status for n in notified] == ["firing"]
    assert notified[0].firing[0].annotations["summary"] == "service scheduler silent"
    engine.heartbeat("scheduler", clock.now())
    result = engine.step(clock.advance(1))
    assert [a.name for a in result.resolved] == ["PaiServiceDown"]
    engine.heartbeat("scheduler", clock.advance(60))
    later = engine.step(clock.now()).notifications
    assert [(n.status, len(n.resolved)) for n in later] == [("resolved", 1)]


def test_an_unchanged_group_is_repeated_only_after_repeat_interval() -> None:
    clock = FakeClock()
    engine = AlertEngine(load_config(SERVICE_DOWN))
    engine.heartbeat("rest", clock.now())
    engine.step(clock.advance(31))
    assert len(engine.step(clock.advance(10)).notifications) == 1
    for _ in range(10):  # ten group intervals inside the hour: nothing new to say
        assert engine.step(clock.advance(300)).notifications == []
    assert len(engine.step(clock.advance(700)).notifications) == 1


def test_pending_alerts_need_their_for_duration_and_vanish_if_the_condition_clears() -> None:
    config = load_config(
        "settings: {sample_ttl: 1h}\nrules: [{alert: Low, expr: 'task_gpu_percent < 10', for: 10m}]\n"
    )
    clock = FakeClock()
    engine = AlertEngine(config)
    engine.sample("task_gpu_percent", {"job_id": "j1"}, 3, clock.now())
    assert engine.step(clock.now()).fired == []
    engine.sample("task_gpu_percent", {"job_id": "j1"}, 50, clock.advance(300))
    assert engine.step(clock.now()).fired == []
    engine.sample("task_gpu_percent", {"job_id": "j1"}, 3, clock.advance(60))
    assert engine.step(clock.now()).fired == []
    assert engine.step(clock.advance(599)).fired == []  # the clock restarted when it cleared
    engine.sample("task_gpu_percent", {"job_id": "j1"}, 3, clock.now())
    assert [a.name for a in engine.step(clock.advance(1)).fired] == ["Low"]


def test_samples_expire_when_no_longer_refreshed() -> None:
    config = load_config(
        "settings: {sample_ttl: 1m}\nrules: [{alert: Hot, expr: 'node_memory_usage_percent > 95'}]\n"
    )
    clock = FakeClock()
    engine = AlertEngine(config)
    engine.sample("node_memory_usage_percent", {"node_name": "n1"}, 99, clock.now())
    assert len(engine.step(clock.now()).fired) == 1
    assert len(engine.step(clock.advance(61)).resolved) == 1


NOTIFY = """
rules:
  - alert: JobStatusChanged
    expr: pai_job_status_change{notify="true"} > 0
    labels: {type: job_notification}
    annotations: {summary: "job $job_name is $state"}
route:
  receiver: owner
  group_by: [job_id, state]
  group_wait: 0s
  repeat_interval: 24h
receivers: [{name: owner}]
"""


def _submitted(job_id: str, notify: dict[str, bool] | None) -> JobSubmitted:
    config: dict[str, object] = {"name": "train"}
    if notify is not None:
        config["extras"] = {"jobStatusChangeNotification": notify}
    return JobSubmitted(
        job_id=job_id, user="alice", name="train", virtual_cluster="default", config=job_model(config)
    )


def _failed(job_id: str) -> JobCompleted:
    return JobCompleted(job_id=job_id, attempt=0, state=JobState.FAILED, exit_code=1)


def test_a_failed_job_whose_owner_asked_is_notified_once_even_if_completion_repeats() -> None:
    clock = FakeClock()
    engine = AlertEngine(load_config(NOTIFY))
    engine.observe(_submitted("j1", {"failed": True}), clock.now())
    engine.observe(_failed("j1"), clock.now())
    first = engine.step(clock.advance(1)).notifications
    assert [(n.firing[0].labels["user"], n.firing[0].labels["state"]) for n in first] == [("alice", "FAILED")]
    engine.observe(_failed("j1"), clock.advance(5))  # delivered again
    for _ in range(5):
        assert engine.step(clock.advance(300)).notifications == []


def test_owners_who_did_not_ask_are_not_notified() -> None:
    clock = FakeClock()
    engine = AlertEngine(load_config(NOTIFY))
    engine.observe(_submitted("j1", {"succeeded": True}), clock.now())
    engine.observe(_submitted("j2", None), clock.now())
    engine.observe(_failed("j1"), clock.now())
    engine.observe(_failed("j2"), clock.now())
    assert engine.step(clock.advance(1)).notifications == []


def test_running_is_notified_once_per_attempt() -> None:
    clock = FakeClock()
    engine = AlertEngine(load_config(NOTIFY))
    engine.observe(_submitted("j1", {"running": True}), clock.now())
    for index in range(3):
        engine.observe(TaskStarted(job_id="j1", attempt=0, role="w", index=index, node="n"), clock.now())
    assert len(engine.step(clock.advance(1)).notifications) == 1


def test_a_job_that_starts_and_ends_between_two_steps_is_told_running_then_succeeded_once() -> None:
    clock = FakeClock()
    engine = AlertEngine(load_config(NOTIFY))
    engine.observe(_submitted("j1", {"running": True, "succeeded": True}), clock.now())
    engine.observe(TaskStarted(job_id="j1", attempt=0, role="w", index=0, node="n"), clock.advance(1))
    done = JobCompleted(job_id="j1", attempt=0, state=JobState.SUCCEEDED, exit_code=0)
    engine.observe(done, clock.advance(2))
    told = engine.step(clock.advance(12)).notifications
    assert [[a.labels["state"] for a in n.firing] for n in told] == [["RUNNING"], ["SUCCEEDED"]]
    for _ in range(5):
        assert engine.step(clock.advance(300)).notifications == []


INHIBIT = """
rules:
  - alert: NodeNotReady
    expr: pai_node_count{ready!="true"} > 0
    labels: {severity: error}
  - alert: NodeMemoryUsage
    expr: node_memory_usage_percent > 95
    labels: {severity: warn}
route: {receiver: ops, group_by: [alertname], group_wait: 0s, group_interval: 0s}
receivers: [{name: ops}]
inhibit_rules:
  - {source_match: {alertname: NodeNotReady}, target_match: {severity: warn}, equal: [node_name]}
"""


def _node(name: str, healthy: bool) -> NodeReported:
    return NodeReported(
        node_id=name, name=name, address="10.0.0.1", cpu=8, memory_mb=1024, gpus=0, healthy=healthy
    )


def test_a_not_ready_node_inhibits_warnings_about_the_same_node_only() -> None:
    clock = FakeClock()
    engine = AlertEngine(load_config(INHIBIT))
    engine.observe(_node("n1", healthy=False), clock.now())
    engine.sample("node_memory_usage_percent", {"node_name": "n1"}, 99, clock.now())
    engine.sample("node_memory_usage_percent", {"node_name": "n2"}, 99, clock.now())
    sent = engine.step(clock.advance(1)).notifications
    memory = [a.labels["node_name"] for n in sent for a in n.firing if a.name == "NodeMemoryUsage"]
    assert memory == ["n2"]
    listed = engine.firing(user=None, admin=True, now=clock.now())
    states = {(a["labels"]["alertname"], a["labels"]["node_name"]): a["status"]["state"] for a in listed}
    assert states[("NodeMemoryUsage", "n1")] == "suppressed"
    # The node recovers: the muted warning is now said.
    engine.observe(_node("n1", healthy=True), clock.now())
    engine.sample("node_memory_usage_percent", {"node_name": "n1"}, 99, clock.now())
    sent = engine.step(clock.advance(1)).notifications
    memory = [a.labels["node_name"] for n in sent for a in n.firing if a.name == "NodeMemoryUsage"]
    assert "n1" in memory


def test_users_see_only_their_jobs_alerts_and_admins_see_all() -> None:
    clock = FakeClock()
    engine = AlertEngine(load_config(NOTIFY))
    engine.observe(_submitted("j1", {"failed": True}), clock.now())
    bob = JobSubmitted(
        job_id="j2",
        user="bob",
        name="t",
        virtual_cluster="default",
        config=job_model({"extras": {"jobStatusChangeNotification": {"failed": True}}}),
    )
    engine.observe(bob, clock.now())
    engine.observe(_failed("j1"), clock.now())
    engine.observe(_failed("j2"), clock.now())
    engine.step(clock.advance(1))
    assert [a["labels"]["user"] for a in engine.firing(user="alice", admin=False, now=clock.now())] == [
        "alice"
    ]
    assert engine.firing(user=None, admin=False, now=clock.now()) == []
    assert len(engine.firing(user=None, admin=True, now=clock.now())) == 2


def test_a_new_configuration_applies_at_the_next_step() -> None:
    clock = FakeClock()
    engine = AlertEngine(load_config(SERVICE_DOWN))
    engine.heartbeat("rest", clock.now())
    assert engine.step(clock.advance(20)).fired == []
    engine.set_config(load_config(SERVICE_DOWN.replace("> 30", "> 10")))
    assert len(engine.step(clock.now()).fired) == 1
    engine.set_config(load_config("route: {receiver: default}\n"))
    assert len(engine.step(clock.now()).resolved) == 1


def test_a_job_pending_for_changing_reasons_is_one_alert_timed_from_the_first_wait() -> None:
    config = load_config("rules: [{alert: PaiJobPending, expr: 'pai_job_pending > 0', for: 30m}]\n")
    clock = FakeClock()
    engine = AlertEngine(config)
    engine.observe(_submitted("j1", None), clock.now())
    engine.step(clock.now())
    for reason, after in (("no free GPU", 600), ("quota exceeded", 600), ("no free GPU", 599)):
        engine.observe(JobPending(job_id="j1", reason=reason), clock.advance(after))
        assert engine.step(clock.now()).fired == []
    fired = engine.step(clock.advance(1)).fired  # 30 min since submission
    assert [(a.name, a.labels["user"]) for a in fired] == [("PaiJobPending", "alice")]
    engine.observe(JobScheduled(job_id="j1", attempt=0, placements=()), clock.now())
    assert len(engine.step(clock.advance(1)).resolved) == 1
