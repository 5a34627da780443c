"""Subjects on the bus are built from ids only; a name that is not an id is refused or hashed."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest

from libs.protocol import subjects, telemetry
from libs.protocol.subjects import SubjectError


def test_each_kind_of_fact_has_its_subject() -> None:
    assert subjects.job_subject("4f2c", "task.completed") == "pai.job.4f2c.task.completed"
    assert subjects.node_subject("n-1", "node.registered") == "pai.node.n-1.node.registered"
    assert subjects.alert_subject("a_1", "alert.fired") == "pai.alert.a_1.alert.fired"
    assert subjects.marketplace_subject("3f9a", "marketplace.item.created") == (
        "pai.marketplace.3f9a.marketplace.item.created"
    )
    assert telemetry.health_subject("rest") == "pai.health.rest"
    assert telemetry.metrics_subject("node-7") == "pai.metrics.node-7"


@pytest.mark.parametrize("value", ["a", "A-z_0", "x" * 128])
def test_an_id_of_letters_digits_underscore_and_dash_is_kept(value: str) -> None:
    assert subjects.check_id(value) == value


@pytest.mark.parametrize("value", ["", "x" * 129, "a.b", "a b", "a*", "a>", "é", "a\n"])
def test_any_other_id_is_refused_with_what_it_is(value: str) -> None:
    with pytest.raises(SubjectError) as caught:
        subjects.check_id(value)
    assert str(caught.value) == f"id {value!r} may only use letters, digits, '_' and '-' (1-128 characters)"


@pytest.mark.parametrize(
    ("build", "what"),
    [
        (lambda bad: subjects.job_subject(bad, "job.submitted"), "job id"),
        (lambda bad: subjects.node_subject(bad, "node.registered"), "node id"),
        (lambda bad: subjects.alert_subject(bad, "alert.fired"), "alert id"),
        (lambda bad: subjects.marketplace_subject(bad, "marketplace.item.created"), "item id"),
        (telemetry.health_subject, "service name"),
        (telemetry.metrics_subject, "node id"),
    ],
)
def test_a_subject_names_the_id_it_refuses(build: object, what: str) -> None:
    with pytest.raises(SubjectError) as caught:
        build("a.b")  # type: ignore[operator]
    assert str(caught.value) == f"{what} 'a.b' may only use letters, digits, '_' and '-' (1-128 characters)"


@pytest.mark.parametrize(
    ("subject", "job_id"),
    [
        ("pai.job.j1.task.completed", "j1"),
        ("pai.job.j1.job.submitted", "j1"),
        ("pai.job.j1.x", "j1"),
        ("pai.job.j1", None),
        ("pai.node.j1.node.registered", None),
        ("other.job.j1.job.submitted", None),
        ("pai.jobs.j1.job.submitted", None),
        ("", None),
    ],
)
def test_the_job_id_is_read_from_job_subjects_only(subject: str, job_id: str | None) -> None:
    assert subjects.job_id_of(subject) == job_id


def test_a_node_named_as_an_id_keeps_its_name() -> None:
    assert subjects.node_token("worker-1") == "worker-1"


def test_a_node_named_otherwise_gets_a_hashed_id() -> None:
    token = subjects.node_token("10.0.0.1")
    assert token == "n" + hashlib.sha256(b"10.0.0.1").hexdigest()[:20]
    assert len(token) == 21
    assert subjects.check_id(token) == token
    assert subjects.node_token("10.0.0.2") != token


def test_a_heartbeat_is_stamped_when_made_and_ignores_what_it_does_not_know() -> None:
    before = datetime.now(UTC)
    beat = telemetry.Heartbeat.model_validate({"service": "rest", "instance": "r1", "extra": 1})
    assert beat.service == "rest"
    assert beat.instance == "r1"
    assert beat.sent_at.tzinfo is not None
    assert before - timedelta(seconds=1) <= beat.sent_at <= datetime.now(UTC)


def test_a_metric_batch_defaults_to_no_samples_and_no_labels() -> None:
    assert telemetry.MetricBatch(node="n1").samples == ()
    sample = telemetry.MetricSample(name="node_gpu_count", value=2)
    assert sample.labels == {}
    assert sample.value == 2.0
