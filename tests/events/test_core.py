"""The gateway's pure core: filters, rights, cursors, the SSE format, webhook checks."""

from __future__ import annotations

import pytest

from services.events.core import sse
from services.events.core.cursors import parse_cursor
from services.events.core.directory import JobDirectory, locate
from services.events.core.filters import (
    EVENT_TYPES,
    Caller,
    EventFilter,
    FilterError,
    JobInfo,
    parse_filter,
    wanted,
)
from services.events.core.webhooks import backoff, check_body, forbidden_address, parse_networks, signature

ALICE, BOB, ADMIN = Caller("alice"), Caller("bob"), Caller("admin", admin=True)
ALICES_JOB = JobInfo("alice", "train", "default")


def test_the_catalog_types_are_known_from_the_event_models() -> None:
    assert {"job.submitted", "task.started", "job.completed", "node.reported", "alert.fired"} <= EVENT_TYPES


@pytest.mark.parametrize(
    ("caller", "event_type", "job", "seen"),
    [
        (ALICE, "task.started", ALICES_JOB, True),
        (BOB, "task.started", ALICES_JOB, False),
        (ADMIN, "task.started", ALICES_JOB, True),
        (BOB, "job.completed", None, False),
        (ALICE, "node.reported", None, False),
        (ADMIN, "node.reported", None, True),
        (ALICE, "alert.fired", ALICES_JOB, True),
        (BOB, "alert.fired", ALICES_JOB, False),
    ],
    ids=[
        "owner-sees-own-job",
        "another-user-does-not",
        "admin-sees-all",
        "unknown-job-admins-only",
        "nodes-not-for-users",
        "nodes-for-admins",
        "alerts-about-own-job",
        "alerts-about-others-job-hidden",
    ],
)
def test_rights_follow_the_rest_api(caller: Caller, event_type: str, job: JobInfo | None, seen: bool) -> None:
    assert wanted(caller, EventFilter(), event_type, job) is seen


@pytest.mark.parametrize(
    ("query", "event_type", "job", "passes"),
    [
        ({"job": "alice~train"}, "task.started", ALICES_JOB, True),
        ({"job": "alice~other"}, "task.started", ALICES_JOB, False),
        ({"username": "alice"}, "job.completed", ALICES_JOB, True),
        ({"vc": "gpu"}, "job.completed", ALICES_JOB, False),
        ({"types": "job.completed,task.started"}, "task.started", ALICES_JOB, True),
        ({"types": "job.completed"}, "task.started", ALICES_JOB, False),
        ({"username": "alice"}, "node.reported", None, False),
    ],
    ids=["job", "other-job", "username", "other-vc", "types", "type-not-asked", "node-not-about-a-job"],
)
def test_filters_select_events(
    query: dict[str, str], event_type: str, job: JobInfo | None, passes: bool
) -> None:
    assert wanted(ADMIN, parse_filter(query), event_type, job) is passes


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"job": "alice"}, "job"),
        ({"job": "~x"}, "job"),
        ({"types": "job.done"}, "types"),
        ({"vc": "a\nb"}, "vc"),
    ],
    ids=["job-without-tilde", "job-without-user", "unknown-type", "newline"],
)
def test_malformed_filters_name_the_field(query: dict[str, str], field: str) -> None:
    with pytest.raises(FilterError) as caught:
        parse_filter(query)
    assert caught.value.field == field


def test_a_job_subscription_follows_the_job_stream_with_plain_sequence_ids() -> None:
    assert parse_filter({"job": "alice~train"}).streams() == ("jobs",)
    assert EventFilter().streams() == ("jobs", "nodes", "alerts")
    assert parse_filter({"types": "alert.fired,job.completed"}).streams() == ("jobs", "alerts")
    cursor = parse_cursor("7-2-3", ("jobs", "nodes", "alerts"), "since")
    assert cursor.advanced("nodes", 9).text() == "7-9-3"
    assert parse_cursor("0", ("jobs", "nodes", "alerts"), "since").text() == "0-0-0"
    for bad in ("x", "-1", "1-2", ""):
        with pytest.raises(FilterError):
            parse_cursor(bad, ("jobs", "nodes", "alerts"), "Last-Event-ID")


def test_the_directory_learns_jobs_and_alerts_from_the_events_themselves() -> None:
    directory = JobDirectory()
    located = locate(
        {"type": "job.submitted", "job_id": "j1", "user": "alice", "name": "t", "virtual_cluster": "vc"},
        directory,
    )
    assert located.job_id == "j1"
    assert directory.job("j1") == JobInfo("alice", "t", "vc")
    assert directory.job_id("alice", "t") == "j1"
    assert locate({"type": "alert.fired", "alert_id": "a1", "job_id": "j1"}, directory).job_id == "j1"
    assert locate({"type": "alert.resolved", "alert_id": "a1"}, directory).job_id == "j1"


def test_an_sse_message_keeps_data_on_data_lines() -> None:
    assert sse.message("5", "job.completed", b'{"a":1}') == b'id: 5\nevent: job.completed\ndata: {"a":1}\n\n'
    assert sse.message("5", "x", b"a\nb") == b"id: 5\nevent: x\ndata: a\ndata: b\n\n"


def test_webhook_bodies_signatures_backoff_and_address_ranges() -> None:
    url, secret, flt = check_body({"url": "https://h.example/x", "secret": "k", "types": ["job.completed"]})
    assert (url, secret, flt.types) == ("https://h.example/x", "k", frozenset({"job.completed"}))
    with pytest.raises(FilterError) as caught:
        check_body({"url": "https://h.example/x", "secret": "k", "colour": "red"})
    assert caught.value.field == "colour"
    # The HMAC-SHA256 of the body with the secret, as RFC 4231 test case 2 gives it.
    assert signature("Jefe", b"what do ya want for nothing?") == (
        "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    )
    assert [backoff(n, 1.0, 10.0) for n in range(1, 6)] == [1.0, 2.0, 4.0, 8.0, 10.0]
    networks = parse_networks("127.0.0.0/8, ::1/128,169.254.0.0/16")
    assert forbidden_address(["10.0.0.1", "127.0.0.1"], networks) == "127.0.0.1"
    assert forbidden_address(["169.254.169.254"], networks) == "169.254.169.254"
    assert forbidden_address(["93.184.216.34", "2001:db8::1"], networks) is None
