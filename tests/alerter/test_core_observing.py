"""Lifecycle events as the series alert rules test, as an operator's rules see them: a job
pending with its owner's labels, status changes with the owner's wishes and address, nodes
ready or lost, heartbeats as ages; and jobs forgotten once their alerts no longer need them."""

from __future__ import annotations

from typing import Any

from libs.protocol.events import (
    JobCompleted,
    JobPending,
    JobRetrying,
    JobScheduled,
    JobState,
    JobSubmitted,
    NodeCordoned,
    NodeLost,
    NodeReported,
    TaskPlacement,
    TaskStarted,
)
from services.alerter.core.observing import Observer, notification_switches
from services.alerter.core.series import Sample, SeriesStore
from tests.support.jobs import job_model

T0 = 1_767_225_600.0
OWNER = {"job_id": "j1", "job_name": "mnist", "user": "alice"}


def submitted(notify: dict[str, Any] | None = None, job_id: str = "j1") -> JobSubmitted:
    config: dict[str, Any] = {"extras": {"jobStatusChangeNotification": notify}} if notify is not None else {}
    return JobSubmitted(
        job_id=job_id, user="alice", name="mnist", virtual_cluster="vc1", config=job_model(config)
    )


def series(store: SeriesStore, now: float = T0) -> list[Sample]:
    return sorted(store.samples(now), key=lambda s: (s.name, sorted(s.labels.items())))


def test_the_states_an_owner_asked_about_are_those_set_to_true() -> None:
    assert notification_switches(job_model()) == frozenset()
    assert notification_switches(job_model({"extras": {}})) == frozenset()
    assert notification_switches(job_model({"extras": {"jobStatusChangeNotification": None}})) == frozenset()
    asked = {"running": True, "failed": None, "succeeded": False, "paging": "yes"}
    assert notification_switches(job_model({"extras": {"jobStatusChangeNotification": asked}})) == frozenset(
        {"running"}
    )


def test_a_submitted_job_is_pending_with_its_owners_labels_and_address() -> None:
    store = SeriesStore()
    observer = Observer(store, contacts={"alice": "alice@example.com"})
    observer.observe(submitted(), T0)
    assert series(store) == [
        Sample("pai_job_pending", {**OWNER, "user_email": "alice@example.com"}, 1.0, None)
    ]
    assert observer.knows("j1")
    assert not observer.knows("j2")


def test_a_pending_job_keeps_the_labels_it_began_with_and_a_replay_its_start() -> None:
    store = SeriesStore()
    contacts: dict[str, str] = {}
    observer = Observer(store, contacts=contacts)
    observer.observe(submitted(), T0 - 600, replayed=True)
    contacts["alice"] = "new@example.com"
    observer.observe(JobPending(job_id="j1", reason="queue moved"), T0)
    assert series(store) == [Sample("pai_job_pending", OWNER, 1.0, T0 - 600)]
    observer.observe(
        JobScheduled(
            job_id="j1", attempt=1, placements=(TaskPlacement(role="w", index=0, node="n", node_address="a"),)
        ),
        T0,
    )
    assert series(store) == []
    observer.observe(JobPending(job_id="j1", reason="again"), T0 + 1)
    assert series(store) == [Sample("pai_job_pending", {**OWNER, "user_email": "new@example.com"}, 1.0, None)]


def test_a_job_not_submitted_here_is_known_by_its_id_only() -> None:
    store = SeriesStore()
    observer = Observer(store)
    observer.observe(JobPending(job_id="j9", reason="r"), T0)
    observer.observe(JobRetrying(job_id="j9", attempt=1, next_attempt=2, kind="user", counted=True), T0)
    assert series(store) == [
        Sample("pai_job_pending", {"job_id": "j9"}, 1.0, None),
        Sample(
            "pai_job_status_change",
            {"job_id": "j9", "state": "RETRIED", "attempt": "1", "notify": "false"},
            1.0,
            None,
        ),
    ]


def test_a_status_change_says_the_state_the_attempt_and_whether_the_owner_asked() -> None:
    store = SeriesStore()
    observer = Observer(store, keep=100)
    observer.observe(submitted({"running": True, "retried": True}), T0)
    started = TaskStarted(job_id="j1", attempt=1, role="w", index=0, node="n1")
    observer.observe(started, T0)
    observer.observe(TaskStarted(job_id="j1", attempt=1, role="w", index=1, node="n1"), T0 + 1)
    observer.observe(JobRetrying(job_id="j1", attempt=1, next_attempt=2, kind="user", counted=True), T0 + 2)
    observer.observe(TaskStarted(job_id="j1", attempt=2, role="w", index=0, node="n1"), T0 + 3)
    changes = [s for s in series(store) if s.name == "pai_job_status_change"]
    assert [(s.labels["state"], s.labels["attempt"], s.labels["notify"]) for s in changes] == [
        ("RETRIED", "1", "true"),
        ("RUNNING", "1", "true"),
        ("RUNNING", "2", "true"),
    ]
    assert all({k: s.labels[k] for k in OWNER} == OWNER for s in changes)
    assert [s.name for s in series(store, T0 + 100)] == [
        "pai_job_pending",
        "pai_job_status_change",
        "pai_job_status_change",
    ]
    assert [s.name for s in series(store, T0 + 103)] == ["pai_job_pending"], "each change kept for `keep`"


def test_a_finished_job_drops_its_series_says_its_end_and_is_forgotten_after_keep() -> None:
    store = SeriesStore()
    observer = Observer(store, keep=60)
    observer.observe(submitted({"failed": True}), T0)
    store.set("task_gpu_percent", {"job_id": "j1"}, 3.0)
    observer.observe(JobCompleted(job_id="j1", attempt=2, state=JobState.FAILED, exit_code=1), T0 + 10)
    assert series(store, T0 + 10) == [
        Sample(
            "pai_job_status_change", {**OWNER, "state": "FAILED", "attempt": "2", "notify": "true"}, 1.0, None
        )
    ]
    observer.observe(JobPending(job_id="j1", reason="late"), T0 + 11)
    assert [s.name for s in series(store, T0 + 11)] == ["pai_job_status_change"], "a late pending is ignored"
    observer.prune(T0 + 69)
    assert observer.knows("j1")
    observer.prune(T0 + 70)
    assert not observer.knows("j1")
    succeeded = Observer(SeriesStore())
    succeeded.observe(submitted({"failed": True}), T0)
    succeeded.observe(JobCompleted(job_id="j1", attempt=1, state=JobState.SUCCEEDED, exit_code=0), T0)
    (change,) = [s for s in series(succeeded.store) if s.name == "pai_job_status_change"]
    assert (change.labels["state"], change.labels["notify"]) == ("SUCCEEDED", "false")


def test_a_finished_job_keeps_its_earlier_state_changes_for_keep_and_each_change_is_reported() -> None:
    store = SeriesStore()
    observer = Observer(store, keep=60)
    assert not observer.observe(submitted({"running": True, "succeeded": True}), T0)
    assert observer.observe(TaskStarted(job_id="j1", attempt=0, role="w", index=0, node="n1"), T0)
    assert not observer.observe(TaskStarted(job_id="j1", attempt=0, role="w", index=1, node="n1"), T0)
    store.set("task_gpu_percent", {"job_id": "j1"}, 3.0)
    done = JobCompleted(job_id="j1", attempt=0, state=JobState.SUCCEEDED, exit_code=0)
    assert observer.observe(done, T0 + 2)
    changes = [s for s in series(store, T0 + 2) if s.name == "pai_job_status_change"]
    assert [s.labels["state"] for s in changes] == ["RUNNING", "SUCCEEDED"]
    assert [s.name for s in series(store, T0 + 2)] == ["pai_job_status_change"] * 2, "its metrics are gone"
    assert [s.labels["state"] for s in series(store, T0 + 60)] == ["SUCCEEDED"], (
        "each kept `keep` from its own time"
    )


def test_a_job_submitted_twice_keeps_what_it_first_said() -> None:
    observer = Observer(SeriesStore())
    observer.remember(submitted({"running": True}))
    observer.remember(
        JobSubmitted(job_id="j1", user="eve", name="other", virtual_cluster="v", config=job_model({}))
    )
    assert observer.job_labels("j1") == OWNER
    assert observer.jobs["j1"].notify == frozenset({"running"})
    assert observer.jobs["j1"].virtual_cluster == "vc1"


def test_a_node_is_counted_ready_or_not_and_its_report_ages() -> None:
    store = SeriesStore()
    observer = Observer(store)
    report = NodeReported(node_id="a", name="n1", address="10.0.0.1", cpu=8, memory_mb=1024, gpus=0)
    observer.observe(report, T0)
    observer.observe(
        NodeReported(
            node_id="a", name="n1", address="10.0.0.1", cpu=8, memory_mb=1024, gpus=0, healthy=False
        ),
        T0 + 5,
    )
    assert series(store, T0 + 30) == [
        Sample("pai_node_count", {"node_name": "n1", "host_ip": "10.0.0.1", "ready": "false"}, 1.0, None),
        Sample("pai_node_report_age_seconds", {"node_name": "n1"}, 25.0),
    ]
    observer.observe(NodeLost(node_id="a", name="n1", reason="silent"), T0 + 40, replayed=True)
    assert series(store, T0 + 40)[0] == Sample(
        "pai_node_count", {"node_name": "n1", "ready": "false", "reason": "silent"}, 1.0, T0 + 40
    )
    observer.observe(NodeCordoned(node_id="a", name="n1"), T0 + 41)
    assert len(series(store, T0 + 41)) == 2


def test_a_heartbeat_reads_as_the_age_of_the_last() -> None:
    store = SeriesStore()
    observer = Observer(store)
    observer.heartbeat("rest", T0)
    assert series(store, T0 + 7) == [Sample("pai_service_heartbeat_age_seconds", {"service": "rest"}, 7.0)]
