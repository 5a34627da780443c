"""Rules evaluated as Prometheus does, as an operator sees the alerts: pending until `for` has
passed, then firing with its labels and annotations, resolved when the condition stops, and
after a restart restored rather than fired again."""

from __future__ import annotations

import hashlib

from libs.alerting.config import Rule
from services.alerter.core.evaluating import Alert, RuleEvaluator, fingerprint, render
from services.alerter.core.series import Sample

T0 = 1_767_225_600.0
IDLE = Rule.model_validate(
    {
        "alert": "GpuIdle",
        "expr": 'task_gpu_percent{job_id!=""} < 10',
        "for": "5m",
        "labels": {"severity": "warn"},
        "annotations": {"summary": "job $job_id at ${value}% on $node", "fix": "$unknown stays"},
    }
)
NOW = Rule.model_validate({"alert": "Down", "expr": "node_up == 0"})


def gpu(job_id: str, value: float, since: float | None = None) -> Sample:
    return Sample("task_gpu_percent", {"job_id": job_id, "node": "n1"}, value, since)


LABELS = {"job_id": "j1", "node": "n1", "severity": "warn", "alertname": "GpuIdle"}


def test_an_alert_is_pending_until_its_for_has_passed_then_fires_once() -> None:
    evaluator = RuleEvaluator()
    assert evaluator.evaluate([IDLE], [gpu("j1", 3)], T0).fired == []
    assert evaluator.firing() == []
    assert evaluator.evaluate([IDLE], [gpu("j1", 4)], T0 + 299).fired == []
    fired = evaluator.evaluate([IDLE], [gpu("j1", 5)], T0 + 300).fired
    assert fired == [Alert(LABELS, {"summary": "job j1 at 5% on n1", "fix": "$unknown stays"}, T0, None, 5.0)]
    assert evaluator.evaluate([IDLE], [gpu("j1", 6)], T0 + 301).fired == []
    (firing,) = evaluator.firing()
    assert (firing.value, firing.annotations["summary"], firing.starts_at) == (6.0, "job j1 at 6% on n1", T0)


def test_a_rule_without_for_fires_at_once_and_series_of_other_metrics_do_nothing() -> None:
    evaluator = RuleEvaluator()
    found = evaluator.evaluate([NOW], [Sample("node_up", {"node": "n2"}, 0), Sample("other", {}, 0)], T0)
    assert found.fired == [Alert({"node": "n2", "alertname": "Down"}, {}, T0, None, 0.0)]
    assert evaluator.evaluate([NOW], [Sample("node_up", {"node": "n3"}, 1)], T0 + 1).fired == []


def test_a_firing_alert_resolves_when_its_condition_stops_and_a_pending_one_is_forgotten() -> None:
    evaluator = RuleEvaluator()
    evaluator.evaluate([IDLE], [gpu("j1", 3), gpu("j2", 3)], T0)
    evaluator.evaluate([IDLE], [gpu("j1", 3), gpu("j2", 50)], T0 + 300)
    found = evaluator.evaluate([IDLE], [gpu("j1", 50)], T0 + 400)
    assert found.fired == []
    assert found.resolved == [
        Alert(LABELS, {"summary": "job j1 at 3% on n1", "fix": "$unknown stays"}, T0, T0 + 400, 3.0)
    ]
    assert evaluator.firing() == []
    again = evaluator.evaluate([IDLE], [gpu("j1", 3)], T0 + 500)
    assert again.fired == []
    assert again.resolved == []


def test_a_series_rebuilt_from_history_counts_its_for_from_when_it_began() -> None:
    evaluator = RuleEvaluator()
    (alert,) = evaluator.evaluate([IDLE], [gpu("j1", 3, since=T0 - 300)], T0).fired
    assert alert.starts_at == T0 - 300
    later = RuleEvaluator()
    assert later.evaluate([IDLE], [gpu("j1", 3, since=T0 + 100)], T0).fired == []
    (alert,) = later.evaluate([IDLE], [gpu("j1", 3)], T0 + 300).fired
    assert alert.starts_at == T0, "a start in the future counts from now"


def test_a_rule_removed_resolves_what_it_had_fired() -> None:
    evaluator = RuleEvaluator()
    evaluator.evaluate([NOW, IDLE], [Sample("node_up", {}, 0), gpu("j1", 3)], T0)
    found = evaluator.evaluate([IDLE], [gpu("j1", 3)], T0 + 10)
    assert found.resolved == [Alert({"alertname": "Down"}, {}, T0, T0 + 10, 0.0)]
    assert evaluator.evaluate([], [], T0 + 20).resolved == []


def test_after_a_restart_an_alert_met_again_is_restored_with_its_start_not_fired() -> None:
    before = Alert(LABELS, {"summary": "old"}, T0 - 900, None, 2.0)
    evaluator = RuleEvaluator()
    evaluator.restore([before, Alert({"alertname": "Gone"}, {}, T0 - 50, T0 - 10)], until=T0 + 60)
    found = evaluator.evaluate([IDLE], [gpu("j1", 4)], T0)
    assert found.fired == []
    assert found.restored == [
        Alert(LABELS, {"summary": "job j1 at 4% on n1", "fix": "$unknown stays"}, T0 - 900, None, 4.0)
    ]
    assert found.resolved == []
    (firing,) = evaluator.firing()
    assert firing.starts_at == T0 - 900


def test_after_a_restart_an_alert_not_met_again_by_the_end_of_the_grace_resolves_then() -> None:
    before = Alert(LABELS, {"summary": "old"}, T0 - 900, None, 2.0)
    evaluator = RuleEvaluator()
    evaluator.restore([before], until=T0 + 60)
    assert evaluator.evaluate([IDLE], [], T0 + 59).resolved == []
    assert evaluator.evaluate([IDLE], [], T0 + 60).resolved == [
        Alert(LABELS, {"summary": "old"}, T0 - 900, T0 + 60, 2.0)
    ]
    assert evaluator.evaluate([IDLE], [], T0 + 61).resolved == []


def test_annotations_fill_in_labels_and_the_value() -> None:
    assert render("$a ${b} $value $c", {"a": "x", "b": "y"}, 0.5) == "x y 0.5 $c"
    assert render("$value", {}, 2.0) == "2"
    assert render("$value", {}, 1e-7) == "1e-07"
    assert render("$value", {"value": "label"}, 3.0) == "3"


def test_an_alerts_identity_is_its_label_set() -> None:
    text = "alertname\x01A\x00job\x01j"
    assert fingerprint({"job": "j", "alertname": "A"}) == hashlib.sha256(text.encode()).hexdigest()[:16]
    assert fingerprint({"a": "b"}) != fingerprint({"a": "c"})
    alert = Alert({"alertname": "A"}, {}, T0)
    assert (alert.name, alert.resolved, alert.fingerprint) == ("A", False, fingerprint({"alertname": "A"}))
    assert Alert({}, {}, T0, T0).resolved
    assert Alert({}, {}, T0).name == ""
