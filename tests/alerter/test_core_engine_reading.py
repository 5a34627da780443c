"""What the alerts page reads of the engine: alerts resolved lately, newest first, each user seeing
their own; the rules in effect and where they come from; samples gaining the job's owner."""

from __future__ import annotations

from libs.alerting.config import load_config
from libs.protocol.events import JobSubmitted
from services.alerter.core.engine import AlertEngine
from services.alerter.core.payloads import iso
from tests.support.jobs import job_model

T0 = 1_767_225_600.0
CONFIG = load_config(
    """
settings: {sample_ttl: 60, evaluation_interval: 10s}
rules:
  - {alert: Idle, expr: 'task_gpu_percent < 10', labels: {severity: warn}}
"""
)


def engine_with_two_resolved() -> AlertEngine:
    engine = AlertEngine(CONFIG, contacts={"alice": "alice@example.com"})
    engine.observe(
        JobSubmitted(job_id="j1", user="alice", name="mnist", virtual_cluster="vc", config=job_model({})), T0
    )
    engine.observe(
        JobSubmitted(job_id="j2", user="bob", name="other", virtual_cluster="vc", config=job_model({})), T0
    )
    engine.sample("task_gpu_percent", {"job_id": "j1"}, 3, T0)
    engine.sample("task_gpu_percent", {"job_id": "j2"}, 3, T0)
    engine.step(T0)
    engine.sample("task_gpu_percent", {"job_id": "j1"}, 50, T0 + 10)
    engine.step(T0 + 10)
    engine.sample("task_gpu_percent", {"job_id": "j2"}, 50, T0 + 20)
    engine.step(T0 + 20)
    return engine


def test_a_sample_of_a_job_gains_its_owner_name_and_address() -> None:
    engine = engine_with_two_resolved()
    engine.sample("task_gpu_percent", {"job_id": "j1", "node": "n1"}, 5, T0 + 30)
    assert (
        engine.store.get(
            "task_gpu_percent",
            {
                "job_id": "j1",
                "node": "n1",
                "job_name": "mnist",
                "user": "alice",
                "user_email": "alice@example.com",
            },
        )
        == 5
    )
    engine.sample("node_up", {"node": "n1"}, 1, T0 + 30)
    assert engine.store.get("node_up", {"node": "n1"}) == 1

    def gpu_series(now: float) -> int:
        return sum(1 for s in engine.store.samples(now) if s.name == "task_gpu_percent")

    assert gpu_series(T0 + 89.9) == 1, "the older samples expired already"
    assert gpu_series(T0 + 90) == 0, "each sample lasts sample_ttl"


def test_alerts_resolved_lately_are_listed_newest_first_each_user_seeing_their_own() -> None:
    engine = engine_with_two_resolved()
    everyone = engine.resolved_since(user=None, admin=True, since=T0)
    assert [(a["labels"]["job_id"], a["endsAt"]) for a in everyone] == [
        ("j2", iso(T0 + 20)),
        ("j1", iso(T0 + 10)),
    ]
    assert [a["labels"]["job_id"] for a in engine.resolved_since(user=None, admin=True, since=T0 + 20)] == [
        "j2"
    ]
    assert engine.resolved_since(user=None, admin=True, since=T0 + 21) == []
    assert [a["labels"]["job_id"] for a in engine.resolved_since(user="alice", admin=False, since=T0)] == [
        "j1"
    ]
    assert engine.resolved_since(user=None, admin=False, since=T0) == []
    assert engine.resolved_since(user="carol", admin=False, since=T0) == []


def test_the_rules_in_effect_say_whether_they_are_stored_or_built_in() -> None:
    engine = AlertEngine(CONFIG)
    found = engine.rules()
    assert found == {
        "source": "built-in",
        "rules": [
            {
                "alert": "Idle",
                "expr": "task_gpu_percent < 10",
                "for": 0.0,
                "labels": {"severity": "warn"},
                "annotations": {},
            }
        ],
        "settings": {"evaluation_interval": 10.0, "status_change_keep": 3600.0, "sample_ttl": 60.0},
    }
    engine.stored_config = True
    assert engine.rules()["source"] == "stored"
