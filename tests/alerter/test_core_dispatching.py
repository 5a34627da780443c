"""Routing, grouping, inhibition and repeats with Alertmanager's meaning, as a receiver meets
them: which receivers an alert reaches with which timings, when a group first speaks and speaks
again, what it says after a restart, and which alerts another mutes."""

from __future__ import annotations

from libs.alerting.config import InhibitRule, load_config
from services.alerter.core.dispatching import Dispatcher, NotifiedRecord, Target, inhibited_by, targets
from services.alerter.core.evaluating import Alert

T0 = 1_767_225_600.0
CONFIG = load_config(
    """
route:
  receiver: ops
  group_by: [alertname]
  group_wait: 10s
  group_interval: 1m
  repeat_interval: 1h
  routes:
    - {receiver: gpu, match: {team: gpu}, group_wait: 20s}
    - {receiver: regex, match_re: {node: 'n[0-9]+'}, continue: true, group_by: ['...']}
    - {receiver: after, match: {severity: critical}, repeat_interval: 2h}
    - {receiver: never, match: {severity: critical}}
receivers: [{name: ops}, {name: gpu}, {name: regex}, {name: after}, {name: never}]
"""
)


def alert(name: str, ends: float | None = None, **labels: str) -> Alert:
    return Alert({"alertname": name, **labels}, {}, T0, ends)


def test_an_alert_reaches_the_first_matching_route_with_what_it_inherits() -> None:
    assert targets(CONFIG.route, {"team": "gpu"}) == [
        Target("0.0", "gpu", ("alertname",), 20.0, 60.0, 3600.0)
    ]
    assert targets(CONFIG.route, {"team": "cpu"}) == [Target("0", "ops", ("alertname",), 10.0, 60.0, 3600.0)]


def test_a_route_that_continues_lets_the_next_matching_one_take_it_too() -> None:
    assert targets(CONFIG.route, {"node": "n12", "severity": "critical"}) == [
        Target("0.1", "regex", ("...",), 10.0, 60.0, 3600.0),
        Target("0.2", "after", ("alertname",), 10.0, 60.0, 7200.0),
    ]
    assert targets(CONFIG.route, {"node": "n12x"}) == [Target("0", "ops", ("alertname",), 10.0, 60.0, 3600.0)]
    assert targets(CONFIG.route, {"node": "xn1"}) == [Target("0", "ops", ("alertname",), 10.0, 60.0, 3600.0)]


def test_a_bare_route_takes_alertmanagers_timings() -> None:
    bare = load_config("route: {receiver: default}").route
    assert targets(bare, {}) == [Target("0", "default", (), 30.0, 300.0, 14400.0)]
    nested = load_config("route: {receiver: default, routes: [{match: {a: b}}]}").route
    assert targets(nested, {"a": "b"}) == [Target("0.0", "default", (), 30.0, 300.0, 14400.0)]


def test_a_group_waits_for_company_then_tells_everything_at_once() -> None:
    dispatcher = Dispatcher(CONFIG)
    dispatcher.receive(alert("A", job="1"), T0)
    dispatcher.receive(alert("A", job="2"), T0 + 5)
    assert dispatcher.next_due() == T0 + 10
    assert dispatcher.flush(T0 + 9.9) == []
    (note,) = dispatcher.flush(T0 + 10)
    assert (note.receiver, note.group_key, note.group_labels, note.status) == (
        "ops",
        "0:ops:alertname=A",
        {"alertname": "A"},
        "firing",
    )
    assert [a.labels["job"] for a in note.firing] == ["1", "2"]
    assert [a.labels["job"] for a in note.fresh] == ["1", "2"]
    assert note.record == NotifiedRecord(
        "0:ops:alertname=A", "ops", tuple(sorted(a.fingerprint for a in note.firing)), T0 + 10
    )
    assert dispatcher.next_due() == T0 + 70


def test_a_change_waits_for_the_group_interval_and_an_unchanged_group_repeats() -> None:
    dispatcher = Dispatcher(CONFIG)
    first = alert("A", job="1")
    dispatcher.receive(first, T0)
    dispatcher.flush(T0 + 10)
    dispatcher.receive(alert("A", job="2"), T0 + 20)
    assert dispatcher.flush(T0 + 69) == []
    (note,) = dispatcher.flush(T0 + 70)
    assert [a.labels["job"] for a in note.fresh] == ["2"]
    assert len(note.firing) == 2
    assert dispatcher.flush(T0 + 130) == [], "nothing new, not yet time to repeat"
    (repeat,) = dispatcher.flush(T0 + 70 + 3600)
    assert (len(repeat.firing), repeat.fresh) == (2, ())
    dispatcher.receive(alert("A", T0 + 3700, job="1"), T0 + 3700)
    (resolved,) = dispatcher.flush(T0 + 70 + 3600 + 60)
    assert [a.labels["job"] for a in resolved.resolved] == ["1"]
    assert [a.labels["job"] for a in resolved.firing] == ["2"]


def test_an_alert_resolved_in_a_group_that_never_told_of_it_says_nothing() -> None:
    dispatcher = Dispatcher(CONFIG)
    dispatcher.receive(alert("A", T0, job="1"), T0)
    assert dispatcher.groups == {}
    assert dispatcher.flush(T0 + 100) == []
    assert dispatcher.next_due() is None


def test_a_group_whose_alerts_all_resolved_is_gone_once_it_said_so() -> None:
    dispatcher = Dispatcher(CONFIG)
    dispatcher.receive(alert("A", job="1"), T0)
    dispatcher.flush(T0 + 10)
    dispatcher.receive(alert("A", T0 + 20, job="1"), T0 + 20)
    (note,) = dispatcher.flush(T0 + 70)
    assert (note.status, len(note.resolved), note.firing) == ("resolved", 1, ())
    assert note.record is not None
    assert note.record.firing == ()
    assert dispatcher.groups == {}
    assert dispatcher.firing == {}


def test_after_a_restart_a_group_continues_from_its_record() -> None:
    told = alert("A", job="1")
    record = NotifiedRecord("0:ops:alertname=A", "ops", (told.fingerprint,), T0)
    older = NotifiedRecord("0:ops:alertname=A", "ops", (), T0 - 50)
    dispatcher = Dispatcher(CONFIG, [record, older])
    assert dispatcher.records == {"0:ops:alertname=A": record}
    dispatcher.receive(told, T0 + 100)
    assert dispatcher.flush(T0 + 110) == [], "already told: nothing new"
    (repeat,) = dispatcher.flush(T0 + 3600)
    assert repeat.fresh == ()
    restarted = Dispatcher(CONFIG, [record])
    restarted.receive(alert("A", T0 + 200, job="1"), T0 + 200)
    (note,) = restarted.flush(T0 + 210)
    assert [a.labels["job"] for a in note.resolved] == ["1"]


def test_records_of_groups_gone_are_kept_for_the_retention_then_dropped() -> None:
    old = NotifiedRecord("0:ops:alertname=Old", "ops", (), T0)
    dispatcher = Dispatcher(CONFIG, [old], retention=100)
    dispatcher.flush(T0 + 100)
    assert list(dispatcher.records) == ["0:ops:alertname=Old"]
    dispatcher.flush(T0 + 100.5)
    assert dispatcher.records == {}


def test_a_group_by_dots_groups_by_every_label() -> None:
    dispatcher = Dispatcher(CONFIG)
    dispatcher.receive(alert("A", node="n1"), T0)
    (note,) = dispatcher.flush(T0 + 10)
    assert (note.receiver, note.group_key, note.group_labels) == (
        "regex",
        "0.1:regex:alertname=A,node=n1",
        {"alertname": "A", "node": "n1"},
    )


SOURCE = alert("NodeDown", node="n1", severity="critical")
TARGET = alert("GpuIdle", node="n1", severity="warn")
RULES = (
    InhibitRule(source_match={"severity": "critical"}, target_match={"severity": "warn"}, equal=("node",)),
)


def test_a_firing_source_mutes_targets_with_the_same_equal_labels() -> None:
    assert inhibited_by(TARGET, {SOURCE.fingerprint: SOURCE}, RULES) == [SOURCE.fingerprint]
    other_node = alert("NodeDown", node="n2", severity="critical")
    assert inhibited_by(TARGET, {other_node.fingerprint: other_node}, RULES) == []
    warn = alert("X", node="n1", severity="warn")
    assert inhibited_by(TARGET, {warn.fingerprint: warn}, RULES) == []
    assert inhibited_by(SOURCE, {SOURCE.fingerprint: SOURCE}, RULES) == []
    assert inhibited_by(TARGET, {TARGET.fingerprint: TARGET}, (InhibitRule(),)) == [], "never by itself"
    missing = alert("GpuIdle", severity="warn")
    bare = alert("NodeDown", severity="critical")
    assert inhibited_by(missing, {bare.fingerprint: bare}, RULES) == [bare.fingerprint], "both lack node"


def test_a_muted_alert_is_not_told() -> None:
    config = load_config(
        "route: {receiver: default, group_wait: 0s, group_by: ['...']}\n"
        "inhibit_rules: [{source_match: {severity: critical}, target_match: {severity: warn}, equal: [node]}]"
    )
    dispatcher = Dispatcher(config)
    dispatcher.receive(SOURCE, T0)
    dispatcher.receive(TARGET, T0)
    notes = dispatcher.flush(T0)
    assert [[a.name for a in n.firing] for n in notes] == [["NodeDown"]]
    assert dispatcher.inhibited(TARGET) == [SOURCE.fingerprint]
