"""The series store finds a job's series by its job id: removing them is exact, and no scan of all."""

from __future__ import annotations

from services.alerter.core.series import SeriesStore


def names(store: SeriesStore, now: float = 0.0) -> set[tuple[str, str]]:
    return {(s.name, dict(s.labels).get("job_id", "")) for s in store.samples(now)}


def test_removing_a_jobs_series_takes_exactly_its_own() -> None:
    store = SeriesStore()
    for job in ("a", "b"):
        store.set("pai_job_pending", {"job_id": job, "vc": "default"}, 1)
        store.set("task_cpu", {"job_id": job, "task": "0"}, 0.5)
        store.set("task_cpu", {"job_id": job, "task": "0"}, 0.7)  # set again: still one series
    store.set("node_count", {"node_name": "n0"}, 1)
    assert store.delete("pai_job_pending", job_id="a") == 1
    assert store.delete_labelled(job_id="a") == 1
    assert names(store) == {("pai_job_pending", "b"), ("task_cpu", "b"), ("node_count", "")}
    assert store.delete_labelled(job_id="a") == 0
    assert store.delete("node_count", node_name="n0") == 1  # a label that is not indexed: found too
    assert store.delete_labelled(job_id="b", task="0") == 1
    assert names(store) == {("pai_job_pending", "b")}


def test_an_expired_series_leaves_the_index_too() -> None:
    store = SeriesStore()
    store.set("task_cpu", {"job_id": "a"}, 1, expires_at=10.0)
    assert names(store, now=11.0) == set()
    store.set("task_cpu", {"job_id": "a"}, 2)  # set anew after it expired
    assert store.delete_labelled(job_id="a") == 1
    assert store._by_job == {}
