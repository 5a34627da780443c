"""The gateway's pure core: filters, rights, cursors, the SSE format, webhook checks."""

from __future__ import annotations

import ipaddress

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
from services.events.core.webhooks import (
    TargetPolicy,
    backoff,
    check_body,
    client_error_verdict,
    literal_address,
    normalised,
    parse_networks,
    refused_address,
    signature,
)

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
    policy = TargetPolicy(forbidden=parse_networks("127.0.0.0/8, ::1/128,169.254.0.0/16"))
    assert "127.0.0.0/8" in (refused_address(["10.0.0.1", "127.0.0.1"], 80, policy) or "")
    assert "169.254.0.0/16" in (refused_address(["169.254.169.254"], 80, policy) or "")
    assert refused_address(["93.184.216.34", "2001:db8::1"], 80, policy) is None


def test_every_form_of_an_address_is_normalised_before_the_target_policy_decides() -> None:
    loopback = ipaddress.ip_address("127.0.0.1")
    for form in (
        "127.0.0.1",
        "2130706433",
        "0177.0.0.1",
        "0x7f.0.0.1",
        "127.1",
        "[::ffff:127.0.0.1]",
        "::127.0.0.1",
    ):
        found = literal_address(form)
        assert found is not None, form
        assert normalised(found) == loopback, form
    assert normalised(ipaddress.ip_address("0.0.0.0")) == loopback
    assert normalised(ipaddress.ip_address("::")) == ipaddress.ip_address("::1")
    assert normalised(ipaddress.ip_address("::ffff:169.254.169.254")) == ipaddress.ip_address(
        "169.254.169.254"
    )
    assert literal_address("example.com") is None
    assert literal_address("1.2.3.4.5") is None
    assert literal_address("256.1.1.1") is None
    kubernetes = TargetPolicy(
        forbidden=parse_networks("127.0.0.0/8,::1/128,169.254.0.0/16,10.0.0.0/8,fc00::/7"),
        allowed=parse_networks("10.1.2.0/24"),
    )
    for address in ("::ffff:169.254.169.254", "::ffff:127.0.0.1", "0.0.0.0", "::", "10.9.9.9", "fd00::1"):
        assert kubernetes.refusal(ipaddress.ip_address(address), 80) is not None, address
    assert kubernetes.refusal(ipaddress.ip_address("10.1.2.3"), 80) is None  # the admin allowed it
    embedded = TargetPolicy(
        own_ports=frozenset({9186, 4222}), own_addresses=frozenset({ipaddress.ip_address("192.0.2.7")})
    )
    assert "PAI_WEBHOOK_FORBIDDEN_PORTS" in (
        embedded.refusal(ipaddress.ip_address("::ffff:127.0.0.1"), 9186) or ""
    )
    assert embedded.refusal(ipaddress.ip_address("0.0.0.0"), 4222) is not None
    assert embedded.refusal(ipaddress.ip_address("192.0.2.7"), 9186) is not None
    assert embedded.refusal(ipaddress.ip_address("127.0.0.1"), 8080) is None  # a local receiver
    assert embedded.refusal(ipaddress.ip_address("192.0.2.8"), 9186) is None  # another machine


def test_a_4xx_answer_is_retried_then_fails_the_subscription_unless_the_admin_chose_otherwise() -> None:
    assert [client_error_verdict("retry", n, 3) for n in (1, 2, 3)] == ["retry", "retry", "fail"]
    assert client_error_verdict("fail", 1, 3) == "fail"
    assert client_error_verdict("drop", 5, 3) == "drop"
