"""What receivers read of an alert: Alertmanager's webhook body, the email's subject and text,
the alerts list; and the series the engine keeps, as rules see them."""

from __future__ import annotations

from services.alerter.core.dispatching import Notification
from services.alerter.core.evaluating import Alert, fingerprint
from services.alerter.core.payloads import alert_json, api_alert, common, email_message, iso, webhook_payload
from services.alerter.core.series import Sample, SeriesStore, label_set

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z

GPU_IDLE = Alert(
    {"alertname": "GpuIdle", "severity": "warn", "job_id": "j1"},
    {"summary": "job j1 leaves its GPUs idle", "runbook": "r1"},
    T0,
)
NODE_DOWN = Alert({"alertname": "NodeDown", "severity": "warn", "node": "n1"}, {"runbook": "r1"}, T0 + 60)
GONE = Alert({"alertname": "GpuIdle", "severity": "warn", "job_id": "j2"}, {}, T0, ends_at=T0 + 120)


def notification(firing: tuple[Alert, ...], resolved: tuple[Alert, ...] = ()) -> Notification:
    return Notification("ops", '{}:{severity="warn"}', {"severity": "warn"}, firing, resolved)


def test_times_read_as_utc_and_no_time_as_the_zero_time() -> None:
    assert iso(T0) == "2026-01-01T00:00:00Z"
    assert iso(T0 + 1.5) == "2026-01-01T00:00:01.500000Z"
    assert iso(None) == "0001-01-01T00:00:00Z"


def test_common_labels_are_those_every_alert_shares() -> None:
    assert common([]) == {}
    assert common([{"a": "1", "b": "2"}]) == {"a": "1", "b": "2"}
    assert common([{"a": "1", "b": "2"}, {"a": "1", "b": "3"}, {"a": "1"}]) == {"a": "1"}


def test_an_alert_reads_as_alertmanager_writes_it() -> None:
    assert alert_json(GONE) == {
        "status": "resolved",
        "labels": {"alertname": "GpuIdle", "severity": "warn", "job_id": "j2"},
        "annotations": {},
        "startsAt": "2026-01-01T00:00:00Z",
        "endsAt": "2026-01-01T00:02:00Z",
        "generatorURL": "",
        "fingerprint": fingerprint(GONE.labels),
    }
    assert alert_json(GPU_IDLE)["status"] == "firing"
    assert alert_json(GPU_IDLE)["endsAt"] == "0001-01-01T00:00:00Z"


def test_the_webhook_body_is_alertmanagers() -> None:
    body = webhook_payload(notification((GPU_IDLE, NODE_DOWN), (GONE,)), external_url="https://pai")
    assert body == {
        "version": "4",
        "groupKey": '{}:{severity="warn"}',
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "ops",
        "groupLabels": {"severity": "warn"},
        "commonLabels": {"severity": "warn"},
        "commonAnnotations": {},
        "externalURL": "https://pai",
        "alerts": [alert_json(GPU_IDLE), alert_json(NODE_DOWN), alert_json(GONE)],
    }


def test_the_webhook_body_leaves_out_resolved_alerts_and_past_the_most_when_asked() -> None:
    body = webhook_payload(notification((GPU_IDLE, NODE_DOWN), (GONE,)), send_resolved=False, max_alerts=1)
    assert body is not None
    assert body["alerts"] == [alert_json(GPU_IDLE)]
    assert body["truncatedAlerts"] == 1
    assert body["commonLabels"] == {"severity": "warn"}
    assert body["commonAnnotations"] == {"runbook": "r1"}
    assert body["externalURL"] == ""
    assert webhook_payload(notification((), (GONE,)), send_resolved=False) is None
    resolved = webhook_payload(notification((), (GONE,)))
    assert resolved is not None
    assert resolved["status"] == "resolved"


def test_an_email_of_one_alert_with_a_summary_says_it() -> None:
    message = email_message(notification((GPU_IDLE,)), subject=None, text=None, send_resolved=True)
    assert message == (
        "[FIRING:1] GpuIdle (severity=warn)",
        "job j1 leaves its GPUs idle\n\n"
        "- [FIRING] GpuIdle: job j1 leaves its GPUs idle (since 2026-01-01T00:00:00Z)\n",
    )


def test_an_email_of_several_alerts_counts_them_and_lists_each() -> None:
    message = email_message(
        notification((GPU_IDLE, NODE_DOWN), (GONE,)), subject=None, text=None, send_resolved=True
    )
    assert message == (
        "[FIRING:3] alerts (severity=warn)",
        "3 alert(s) firing.\n\n"
        "- [FIRING] GpuIdle: job j1 leaves its GPUs idle (since 2026-01-01T00:00:00Z)\n"
        "- [FIRING] NodeDown: alertname=NodeDown, node=n1, severity=warn (since 2026-01-01T00:01:00Z)\n"
        "- [RESOLVED] GpuIdle: alertname=GpuIdle, job_id=j2, severity=warn (since 2026-01-01T00:00:00Z)\n",
    )


def test_an_email_of_resolved_alerts_only_says_resolved() -> None:
    message = email_message(
        Notification("ops", "k", {}, (), (GONE,)),
        subject="$status $STATUS $count $severity $job_id $unknown",
        text="$alertname: $status_sentence",
        send_resolved=True,
    )
    assert message == ("resolved RESOLVED 1 warn j2 $unknown", "GpuIdle: 1 alert(s) resolved.")
    assert (
        email_message(Notification("ops", "k", {}, (), (GONE,)), subject=None, text=None, send_resolved=False)
        is None
    )


def test_a_single_resolved_alert_with_a_summary_is_counted_not_summarised() -> None:
    summarised = Alert({"alertname": "A"}, {"summary": "s"}, T0, ends_at=T0)
    message = email_message(
        Notification("ops", "k", {}, (), (summarised,)), subject=None, text=None, send_resolved=True
    )
    assert message is not None
    assert message[1].startswith("1 alert(s) resolved.\n\n- [RESOLVED] A: s (since")
    with_one_more = email_message(
        Notification("ops", "k", {}, (GPU_IDLE,), (summarised,)), subject=None, text=None, send_resolved=True
    )
    assert with_one_more is not None
    assert with_one_more[1].startswith("2 alert(s) firing.")


def test_a_subject_is_one_line() -> None:
    message = email_message(notification((GPU_IDLE,)), subject="a\n  b\tc ", text="x", send_resolved=True)
    assert message == ("a b c", "x")


def test_the_alerts_list_shows_receivers_and_what_inhibits() -> None:
    assert api_alert(GPU_IDLE, receivers=["ops", "mail"], inhibited_by=[], now=T0 + 5) == {
        "labels": dict(GPU_IDLE.labels),
        "annotations": dict(GPU_IDLE.annotations),
        "startsAt": "2026-01-01T00:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "updatedAt": "2026-01-01T00:00:05Z",
        "generatorURL": "",
        "fingerprint": GPU_IDLE.fingerprint,
        "receivers": [{"name": "ops"}, {"name": "mail"}],
        "status": {"state": "active", "silencedBy": [], "inhibitedBy": []},
    }
    inhibited = api_alert(GPU_IDLE, receivers=[], inhibited_by=["abc"], now=T0)
    assert inhibited["status"] == {"state": "suppressed", "silencedBy": [], "inhibitedBy": ["abc"]}


# -- series -----------------------------------------------------------------------------------


def test_a_series_is_kept_by_name_and_labels_in_any_order() -> None:
    store = SeriesStore()
    store.set("m", {"b": "2", "a": "1"}, 5.0)
    assert label_set({"b": "2", "a": "1"}) == (("a", "1"), ("b", "2"))
    assert store.get("m", {"a": "1", "b": "2"}) == 5.0
    assert store.get("m", {"a": "1"}) is None
    assert list(store.samples(T0)) == [Sample("m", {"a": "1", "b": "2"}, 5.0, None)]


def test_a_series_set_again_to_its_value_keeps_when_it_began() -> None:
    store = SeriesStore()
    store.set("m", {}, 1.0, since=T0 + 10)
    store.set("m", {}, 1.0, since=T0 + 20)
    assert list(store.samples(T0)) == [Sample("m", {}, 1.0, T0 + 10)]
    store.set("m", {}, 1.0, since=T0 + 5)
    assert list(store.samples(T0)) == [Sample("m", {}, 1.0, T0 + 5)]
    store.set("m", {}, 1.0)
    assert list(store.samples(T0)) == [Sample("m", {}, 1.0, T0 + 5)]
    store.set("m", {}, 2.0)
    assert list(store.samples(T0)) == [Sample("m", {}, 2.0, None)]
    store.set("m", {}, 2.0, since=T0 + 50)
    assert list(store.samples(T0)) == [Sample("m", {}, 2.0, T0 + 50)]


def test_an_expired_series_is_gone_from_the_moment_it_expires() -> None:
    store = SeriesStore()
    store.set("m", {"job_id": "j1"}, 1.0, expires_at=T0 + 10)
    store.set("n", {}, 1.0)
    assert [s.name for s in store.samples(T0 + 9.9)] == ["m", "n"]
    assert [s.name for s in store.samples(T0 + 10)] == ["n"]
    assert store.get("m", {"job_id": "j1"}) is None
    store.set("m", {"job_id": "j1"}, 3.0)
    assert store.delete("m", job_id="j1") == 1


def test_a_touched_series_reads_as_its_age_never_below_zero() -> None:
    store = SeriesStore()
    store.touch("heard", {"service": "rest"}, T0 + 100)
    store.touch("heard", {"service": "rest"}, T0 + 50)
    assert list(store.samples(T0 + 130)) == [Sample("heard", {"service": "rest"}, 30.0)]
    assert list(store.samples(T0)) == [Sample("heard", {"service": "rest"}, 0.0)]


def test_a_jobs_series_are_deleted_by_name_or_all_at_once() -> None:
    store = SeriesStore()
    store.set("pending", {"job_id": "j1", "vc": "a"}, 1.0)
    store.set("pending", {"job_id": "j2", "vc": "a"}, 1.0)
    store.set("gpu", {"job_id": "j1"}, 1.0)
    store.set("node", {"vc": "a"}, 1.0)
    assert store.delete("pending", job_id="j9") == 0
    assert store.delete("pending", job_id="j1", vc="b") == 0
    assert store.delete("pending", job_id="j1") == 1
    assert store.get("pending", {"job_id": "j2", "vc": "a"}) == 1.0
    assert store.delete_labelled(job_id="j1") == 1
    assert store.get("gpu", {"job_id": "j1"}) is None
    assert store.delete_labelled(job_id="j1") == 0
    assert store.delete("pending", vc="a") == 1
    assert store.delete_labelled(vc="a") == 1
    assert list(store.samples(T0)) == []
    store.set("gpu", {"job_id": "j1"}, 2.0)
    assert store.delete_labelled(job_id="j1") == 1


def test_a_jobs_series_set_twice_is_deleted_once() -> None:
    store = SeriesStore()
    store.set("a", {"job_id": "j1"}, 1.0)
    store.set("a", {"job_id": "j1"}, 2.0)
    store.set("b", {"job_id": "j1"}, 1.0)
    assert store.delete("a", job_id="j1") == 1
    assert store.delete("b", job_id="j1") == 1
    store.set("a", {"job_id": "j1"}, 1.0)
    assert store.delete_labelled(job_id="j1") == 1


def test_an_email_subject_names_every_group_label_or_none() -> None:
    grouped = Notification("ops", "k", {"severity": "warn", "team": "gpu"}, (GPU_IDLE,), ())
    message = email_message(grouped, subject=None, text=None, send_resolved=True)
    assert message is not None
    assert message[0] == "[FIRING:1] GpuIdle (severity=warn team=gpu)"
    ungrouped = email_message(
        Notification("ops", "k", {}, (GPU_IDLE,), ()), subject=None, text=None, send_resolved=True
    )
    assert ungrouped is not None
    assert ungrouped[0] == "[FIRING:1] GpuIdle"
