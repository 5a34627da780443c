"""Webhook subscriptions' pure rules as an API client and an admin meet them: each refused body
with its field and whole message, the receivers' addresses in every literal form, the target
policy's reasons, which answers are retried, and what the API shows of a webhook and its
deliveries (never the secret)."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime

import pytest

from services.events.core.filters import FilterError
from services.events.core.webhooks import (
    MAX_SECRET,
    MAX_URL,
    Attempt,
    Attempts,
    TargetPolicy,
    Webhook,
    backoff,
    check_body,
    literal_address,
    loopback_name,
    normalised,
    parse_networks,
    parse_ports,
    refused_address,
    retryable,
    url_port,
)

URL = "https://h.example/hook"
AT = datetime(2026, 11, 26, 12, 30, tzinfo=UTC)
NETWORKS = "(rule PAI_WEBHOOK_FORBIDDEN_NETWORKS)"


def refusal(body: dict[str, object]) -> tuple[str, str]:
    with pytest.raises(FilterError) as caught:
        check_body(body)
    return caught.value.field, caught.value.message


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"secret": "k"}, "url", "url is required: the http(s) address that receives the events."),
        ({"url": "", "secret": "k"}, "url", "url is required: the http(s) address that receives the events."),
        ({"url": 5, "secret": "k"}, "url", "url is required: the http(s) address that receives the events."),
        (
            {"url": "https://h.example/" + "a" * MAX_URL, "secret": "k"},
            "url",
            f"url is longer than {MAX_URL} characters.",
        ),
        (
            {"url": "ftp://h.example/" + "a" * 60, "secret": "k"},
            "url",
            "url must start with http:// or https://, got 'ftp://h.example/aaaaaaaaaaaaaaaaaaaaaaaa'.",
        ),
        ({"url": "https:///path", "secret": "k"}, "url", "url names no host."),
        (
            {"url": "https://user@h.example/", "secret": "k"},
            "url",
            "url must not carry credentials; the secret signs each delivery instead.",
        ),
        (
            {"url": "https://user:pw@h.example/", "secret": "k"},
            "url",
            "url must not carry credentials; the secret signs each delivery instead.",
        ),
        ({"url": URL}, "secret", f"secret is required: a string of 1 to {MAX_SECRET} characters."),
        (
            {"url": URL, "secret": ""},
            "secret",
            f"secret is required: a string of 1 to {MAX_SECRET} characters.",
        ),
        (
            {"url": URL, "secret": 5},
            "secret",
            f"secret is required: a string of 1 to {MAX_SECRET} characters.",
        ),
        (
            {"url": URL, "secret": "k" * (MAX_SECRET + 1)},
            "secret",
            f"secret is required: a string of 1 to {MAX_SECRET} characters.",
        ),
        (
            {"url": URL, "secret": "k", "zone": "a", "colour": "red"},
            "colour",
            "colour is not a webhook field (url, secret, types, job, username, vc).",
        ),
    ],
    ids=[
        "no-url",
        "empty-url",
        "url-not-text",
        "url-too-long",
        "another-scheme",
        "no-host",
        "a-user-name",
        "a-password",
        "no-secret",
        "empty-secret",
        "secret-not-text",
        "secret-too-long",
        "unknown-fields-first-named",
    ],
)
def test_a_refused_webhook_body_names_its_field_and_the_fix(
    body: dict[str, object], field: str, message: str
) -> None:
    assert refusal(body) == (field, message)


def test_a_webhook_body_at_the_limits_with_every_filter_is_accepted() -> None:
    url = "http://h.example/" + "a" * (MAX_URL - len("http://h.example/"))
    body = {
        "url": url,
        "secret": "k" * MAX_SECRET,
        "job": "alice~t",
        "username": "alice",
        "vc": "gpu",
        "types": [],
    }
    got_url, secret, flt = check_body(body)
    assert (got_url, secret) == (url, "k" * MAX_SECRET)
    assert flt.to_query() == {"job": "alice~t", "username": "alice", "vc": "gpu"}


def test_retries_double_up_to_the_largest_wait() -> None:
    assert backoff(0, 1.5, 10.0) == 1.5
    assert backoff(3, 0.5, 100.0) == 2.0
    # The exponent stops at 40 (no overflow however long a receiver stays down).
    assert backoff(10_000, 1.0, 1e300) == float(2**40)


@pytest.mark.parametrize(
    ("status", "again"),
    [
        (None, True),
        (500, True),
        (503, True),
        (408, True),
        (429, True),
        (499, False),
        (404, False),
        (200, False),
    ],
)
def test_no_answer_a_5xx_408_or_429_is_retried(status: int | None, again: bool) -> None:
    assert retryable(status) is again


def test_a_receiver_s_port_is_its_url_s_or_the_scheme_s() -> None:
    assert url_port("https://h.example/x") == 443
    assert url_port("http://h.example/x") == 80
    assert url_port("https://h.example:8443/x") == 8443
    assert parse_ports("9186, 4222,,") == frozenset({9186, 4222})
    assert parse_ports("") == frozenset()


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("fe80::1%eth0", "fe80::1"),
        ("[fe80::1%a%b]", "fe80::1"),
        ("255.255.255.255", "255.255.255.255"),
        ("010.1.1.1", "8.1.1.1"),
        ("0.0.0.0", "0.0.0.0"),
        ("1.2.65535", "1.2.255.255"),
        ("0x0A.0", "10.0.0.0"),
        ("127.0.0.1.", "127.0.0.1"),
        ("2130706433.", "127.0.0.1"),
    ],
)
def test_a_literal_address_in_any_form_is_read(host: str, address: str) -> None:
    found = literal_address(host)
    assert found == ipaddress.ip_address(address)
    assert str(found) == address


@pytest.mark.parametrize(
    "host",
    [
        "1.2.3.4.0",
        "1.2.3.256",
        "1.2.65536",
        "09.1.1.1",
        "1. 2.3.4",
        "1.+2.3.4",
        "X1.2.3.4",
        "1..2",
        "0xZZ.1",
        "g::1",
        "1.2.3.4..",
        ".",
    ],
)
def test_what_is_no_address_is_left_to_the_resolver(host: str) -> None:
    assert literal_address(host) is None


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("localhost.", True),
        ("LocalHost.", True),
        ("api.localhost.", True),
        ("localhost.example", False),
        ("notlocalhost", False),
        ("example.com.", False),
    ],
)
def test_localhost_names_are_loopback_with_or_without_the_trailing_dot(host: str, loopback: bool) -> None:
    assert loopback_name(host) is loopback


def test_only_addresses_reaching_this_machine_become_loopback() -> None:
    assert normalised(ipaddress.ip_address("::1")) == ipaddress.ip_address("::1")
    assert normalised(ipaddress.ip_address("::2")) == ipaddress.ip_address("127.0.0.1")
    assert normalised(ipaddress.ip_address("::10.0.0.1")) == ipaddress.ip_address("10.0.0.1")
    assert normalised(ipaddress.ip_address("2001:db8::1")) == ipaddress.ip_address("2001:db8::1")
    assert normalised(ipaddress.ip_address("1.0.0.0")) == ipaddress.ip_address("1.0.0.0")


def test_the_admin_s_ranges_are_read_loosely() -> None:
    assert parse_networks(" 10.1.2.3/24 ,, fd00::1/8") == (
        ipaddress.ip_network("10.1.2.0/24"),
        ipaddress.ip_network("fd00::/8"),
    )


def test_a_refused_receiver_is_told_the_rule_that_refuses_it() -> None:
    policy = TargetPolicy(
        forbidden=parse_networks("127.0.0.0/8,10.0.0.0/8"),
        allowed=parse_networks("10.1.0.0/16"),
        own_ports=frozenset({9186}),
    )
    assert refused_address(["93.184.216.34", "::ffff:10.2.0.1"], 443, policy) == (
        f"10.2.0.1 is in 10.0.0.0/8, a range webhooks may not reach {NETWORKS}"
    )
    assert refused_address(["127.0.0.1"], 9186, policy) == (
        "127.0.0.1 port 9186 is one of this platform's own ports (its API, portal, metrics or NATS; "
        "rule PAI_WEBHOOK_FORBIDDEN_PORTS)"
    )
    # A name (not yet resolved) is not judged here; an allowed range is reached.
    assert refused_address(["receiver.example", "10.1.2.3"], 9186, policy) is None


def test_what_the_api_shows_of_a_webhook_never_holds_its_secret() -> None:
    hook = Webhook(
        id="w1",
        owner="alice",
        url=URL,
        secret="s3cret",
        job="alice~t",
        types=("job.completed",),
        created_at=AT,
    )
    assert hook.view() == {
        "id": "w1",
        "owner": "alice",
        "url": URL,
        "types": ["job.completed"],
        "job": "alice~t",
        "username": None,
        "vc": None,
        "createdAt": "2026-11-26T12:30:00+00:00",
        "state": "active",
        "failingSince": None,
        "lastError": "",
    }
    failing = hook.model_copy(update={"failing": True, "failing_since": AT, "last_error": "HTTP 500"})
    assert failing.view() | {"state": "x"} == hook.view() | {
        "state": "x",
        "failingSince": "2026-11-26T12:30:00+00:00",
        "lastError": "HTTP 500",
    }
    assert failing.view()["state"] == "failing"


def attempt(number: int, **fields: object) -> Attempt:
    values: dict[str, object] = {
        "delivery": f"e{number}",
        "type": "job.completed",
        "stream": "jobs",
        "sequence": number,
        "attempt": number,
        "at": AT,
    }
    return Attempt.model_validate(values | fields)


def test_a_delivery_attempt_is_shown_with_its_answer_and_the_latest_ones_are_kept() -> None:
    assert attempt(2, status=502, latency_ms=12.345, error="HTTP 502").view() == {
        "delivery": "e2",
        "event": "job.completed",
        "attempt": 2,
        "status": 502,
        "latencyMs": 12.3,
        "error": "HTTP 502",
        "ok": False,
        "at": "2026-11-26T12:30:00+00:00",
    }
    kept = Attempts()
    for number in range(1, 5):
        kept = kept.added(attempt(number), 3)
    assert [a.attempt for a in kept.items] == [2, 3, 4]
