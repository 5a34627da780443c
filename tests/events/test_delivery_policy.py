"""A webhook delivery's attempts and its retry policy over a fake receiver, no bus: each POST's
headers, signature and limits, what an answer, a timeout or a refused address records, and when
the subscription retries, gives up (marked failing), drops the event, or leaves it to a restart."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import aiohttp
import pytest
import structlog

from libs.backbone.errors import TemporaryError
from services.events.adapters import delivering
from services.events.adapters.delivering import AddressRefused, CheckingResolver, Deliveries
from services.events.core.webhooks import TargetPolicy, signature
from services.events.settings import EventsSettings
from tests.events.test_delivery_fakes import HOOK, NOW, Answer, FakeSession, _deliveries

BODY = b'{"type": "job.completed", "event_id": "e1"}'


class Raising:
    """A receiver whose POST raises ``error`` (a timeout, a connection error)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def post(self, url: str, **options: Any) -> Answer:
        raise self.error


def _with(tmp_path: Path, session: Any, **settings: Any) -> Deliveries:
    found = _deliveries(tmp_path, cast(Any, session))
    found.settings = EventsSettings(
        nats_url="nats://127.0.0.1:9", rest_url="http://127.0.0.1:9", data_dir=tmp_path, **settings
    )
    found.webhooks[HOOK.id] = HOOK
    return found


@pytest.fixture
def marks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, str]]:
    seen: list[tuple[bool, str]] = []

    async def mark(self: Deliveries, hook: Any, *, failing: bool, error: str = "") -> None:
        seen.append((failing, error))

    monkeypatch.setattr(Deliveries, "_mark", mark)
    return seen


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, float, float]]:
    """Each back-off asked for (attempt, first, largest); none is waited."""
    seen: list[tuple[int, float, float]] = []

    def backoff(number: int, first: float, largest: float) -> float:
        seen.append((number, first, largest))
        return 0.0

    monkeypatch.setattr(delivering, "backoff", backoff)
    return seen


async def test_each_post_is_signed_typed_and_bounded_and_its_answer_recorded(tmp_path: Path) -> None:
    session = FakeSession(204)
    deliveries = _with(tmp_path, session, webhook_timeout_seconds=7.5)
    record = await deliveries.attempt(HOOK, "jobs", 12, "job.completed", "e1", BODY, 3)
    [post] = session.posts
    assert post["url"] == HOOK.url
    assert post["data"] == BODY
    assert post["headers"] == {
        "Content-Type": "application/json",
        "User-Agent": "pai-webhooks",
        "X-PAI-Event": "job.completed",
        "X-PAI-Delivery": "e1",
        "X-PAI-Signature-256": signature(HOOK.secret, BODY),
    }
    assert post["allow_redirects"] is False
    assert post["timeout"].total == 7.5
    assert (record.delivery, record.type, record.stream, record.sequence, record.attempt) == (
        "e1",
        "job.completed",
        "jobs",
        12,
        3,
    )
    assert (record.status, record.ok, record.error, record.refused, record.at) == (204, True, "", False, NOW)
    assert record.latency_ms >= 0
    assert await deliveries.recent(HOOK.id) == [record]


@pytest.mark.parametrize(
    ("status", "ok", "error"),
    [(200, True, ""), (299, True, ""), (300, False, "HTTP 300"), (503, False, "HTTP 503")],
)
async def test_an_answer_outside_2xx_is_a_failed_attempt_naming_its_status(
    tmp_path: Path, status: int, ok: bool, error: str
) -> None:
    record = await _with(tmp_path, FakeSession(status)).attempt(HOOK, "jobs", 1, "t", "e1", BODY, 1)
    assert (record.status, record.ok, record.error) == (status, ok, error)


@pytest.mark.parametrize(
    ("error", "said", "refused"),
    [
        (TimeoutError(), "no answer within 2.5s", False),
        (aiohttp.ClientConnectionError("reset by peer"), "ClientConnectionError: reset by peer", False),
        (AddressRefused("10.0.0.1 is in a forbidden network"), "10.0.0.1 is in a forbidden network", True),
    ],
)
async def test_no_answer_is_recorded_with_why(
    tmp_path: Path, error: BaseException, said: str, refused: bool
) -> None:
    deliveries = _with(tmp_path, Raising(error), webhook_timeout_seconds=2.5)
    record = await deliveries.attempt(HOOK, "jobs", 1, "t", "e1", BODY, 1)
    assert (record.status, record.ok, record.error, record.refused) == (None, False, said, refused)


class _ConnectorFailed(aiohttp.ClientError):
    """How aiohttp hands on what the resolver raised: the cause in ``os_error``."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.os_error = cause


async def test_a_connection_refused_by_the_resolver_is_a_refused_address(tmp_path: Path) -> None:
    cause = AddressRefused("receiver.example resolves to 127.0.0.1, a loopback address")
    record = await _with(tmp_path, Raising(_ConnectorFailed(cause))).attempt(
        HOOK, "jobs", 1, "t", "e1", BODY, 1
    )
    assert (record.error, record.refused) == (str(cause), True)


async def test_a_failing_receiver_is_tried_again_with_growing_pauses_until_it_takes_the_event(
    tmp_path: Path, marks: list[tuple[bool, str]], pauses: list[tuple[int, float, float]]
) -> None:
    session = FakeSession(503, 429, 408, 200)
    deliveries = _with(tmp_path, session, webhook_backoff_first_seconds=2.0, webhook_backoff_max_seconds=60.0)
    await deliveries.deliver(HOOK, "jobs", 5, "job.completed", "e1", BODY)
    assert len(session.posts) == 4
    assert {post["data"] for post in session.posts} == {BODY}  # the same event each time
    assert pauses == [(1, 2.0, 60.0), (2, 2.0, 60.0), (3, 2.0, 60.0)]
    assert [a.attempt for a in await deliveries.recent(HOOK.id)] == [1, 2, 3, 4]
    assert marks == []


async def test_past_the_retry_window_the_subscription_is_marked_failing_with_the_last_error(
    tmp_path: Path, marks: list[tuple[bool, str]], pauses: list[tuple[int, float, float]]
) -> None:
    session = FakeSession(503, 503)
    deliveries = _with(tmp_path, session, webhook_retry_window_seconds=1e-9)
    await deliveries.deliver(HOOK, "jobs", 5, "t", "e1", BODY)
    assert len(session.posts) == 1
    assert marks == [(True, "HTTP 503")]
    assert pauses == []


async def test_the_subscription_marked_failing_is_the_one_delivered_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pauses: list[tuple[int, float, float]]
) -> None:
    marked: list[Any] = []

    async def mark(self: Deliveries, hook: Any, *, failing: bool, error: str = "") -> None:
        marked.append(hook)

    monkeypatch.setattr(Deliveries, "_mark", mark)
    deliveries = _with(tmp_path, FakeSession(503), webhook_retry_window_seconds=1e-9)
    await deliveries.deliver(HOOK, "jobs", 5, "t", "e1", BODY)
    assert marked == [HOOK]


async def test_a_forbidden_address_marks_the_subscription_failing_at_once(
    tmp_path: Path, marks: list[tuple[bool, str]], pauses: list[tuple[int, float, float]]
) -> None:
    deliveries = _with(tmp_path, Raising(AddressRefused("10.0.0.1 is forbidden")))
    await deliveries.deliver(HOOK, "jobs", 5, "t", "e1", BODY)
    assert marks == [(True, "10.0.0.1 is forbidden")]
    assert pauses == []


async def test_a_client_error_is_retried_up_to_its_attempts_then_fails_the_subscription(
    tmp_path: Path, marks: list[tuple[bool, str]], pauses: list[tuple[int, float, float]]
) -> None:
    session = FakeSession(404, 404, 404, 200)
    deliveries = _with(tmp_path, session, webhook_client_error_attempts=3)
    await deliveries.deliver(HOOK, "jobs", 5, "t", "e1", BODY)
    assert len(session.posts) == 3
    assert marks == [(True, "HTTP 404: the receiver refused the delivery 3 times")]
    assert [p[0] for p in pauses] == [1, 2]


async def test_client_errors_set_to_fail_fail_at_the_first_and_set_to_drop_go_on_unmarked(
    tmp_path: Path, marks: list[tuple[bool, str]], pauses: list[tuple[int, float, float]]
) -> None:
    failing = _with(tmp_path, FakeSession(400), webhook_client_errors="fail")
    await failing.deliver(HOOK, "jobs", 5, "t", "e1", BODY)
    assert marks == [(True, "HTTP 400: the receiver refused the delivery 1 times")]
    dropping = _with(tmp_path, FakeSession(400, 200), webhook_client_errors="drop")
    await dropping.deliver(HOOK, "jobs", 6, "t", "e2", BODY)
    assert len(marks) == 1
    assert [(a.status, a.ok) for a in await dropping.recent(HOOK.id)] == [(400, False)]
    assert pauses == []


@pytest.mark.parametrize("meanwhile", ["deleted", "failing"])
async def test_a_subscription_deleted_or_failing_meanwhile_is_not_tried_again(
    tmp_path: Path, marks: list[tuple[bool, str]], pauses: list[tuple[int, float, float]], meanwhile: str
) -> None:
    session = FakeSession(503, 200)
    deliveries = _with(tmp_path, session)
    if meanwhile == "deleted":
        del deliveries.webhooks[HOOK.id]
    else:
        deliveries.webhooks[HOOK.id] = HOOK.model_copy(update={"failing": True})
    await deliveries.deliver(HOOK, "jobs", 5, "t", "e1", BODY)
    assert len(session.posts) == 1
    assert (marks, pauses) == ([], [])


async def test_a_gateway_that_stops_during_a_pause_leaves_the_event_unacknowledged(
    tmp_path: Path, marks: list[tuple[bool, str]], pauses: list[tuple[int, float, float]]
) -> None:
    session = FakeSession(503, 200)
    deliveries = _with(tmp_path, session)
    deliveries._stop.set()
    with pytest.raises(TemporaryError, match=r"^the gateway stops$") as stopped:
        await deliveries.deliver(HOOK, "jobs", 5, "t", "e1", BODY)
    assert stopped.value.delay == 1.0
    assert len(session.posts) == 1
    assert marks == []


async def test_an_attempt_is_stamped_with_the_time_in_utc(tmp_path: Path) -> None:
    deliveries = _with(tmp_path, FakeSession(204))
    deliveries.clock = Deliveries(*(cast(Any, None),) * 5).clock  # the gateway's own
    before = datetime.now(UTC)
    record = await deliveries.attempt(HOOK, "jobs", 1, "t", "e1", BODY, 1)
    assert record.at.tzinfo is UTC
    assert before <= record.at <= datetime.now(UTC)


class Clock:
    """``time.monotonic`` as the deliveries read it: ``step`` seconds later at each reading."""

    def __init__(self, step: float, start: float = 100_000.0) -> None:
        self.now = start
        self.step = step

    def monotonic(self) -> float:
        self.now += self.step
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    found = Clock(step=20.0)
    monkeypatch.setattr(delivering, "time", found)
    return found


async def test_an_attempts_latency_is_the_time_its_post_took_in_milliseconds(
    tmp_path: Path, clock: Clock
) -> None:
    clock.step = 0.25  # each reading: started, then answered
    record = await _with(tmp_path, FakeSession(204)).attempt(HOOK, "jobs", 1, "t", "e1", BODY, 1)
    assert record.latency_ms == 250.0


@pytest.mark.parametrize(("window", "posts"), [(60.0, 1), (61.0, 2)])
async def test_the_retry_window_ends_once_the_time_since_the_first_try_reaches_it(
    tmp_path: Path,
    clock: Clock,
    marks: list[tuple[bool, str]],
    pauses: list[tuple[int, float, float]],
    window: float,
    posts: int,
) -> None:
    # Each attempt reads the clock twice, the window once after it: 60 s after the first try at
    # the first failure, 140 s at the second.
    session = FakeSession(503, 503, 503)
    deliveries = _with(tmp_path, session, webhook_retry_window_seconds=window)
    with structlog.testing.capture_logs() as logs:
        await deliveries.deliver(HOOK, "jobs", 5, "t", "e1", BODY)
    assert len(session.posts) == posts
    assert marks == [(True, "HTTP 503")]
    assert logs == [
        {
            "event": "webhook failing; deliveries stop",
            "webhook": "h1",
            "error": "HTTP 503",
            "log_level": "warning",
        }
    ]


class Resolving:
    """A resolver that records each host asked and answers with one address."""

    def __init__(self, policy: TargetPolicy, address: str) -> None:
        self.resolver = CheckingResolver(policy)
        self.asked: list[str] = []

        async def resolve(host: str, port: int = 0, family: Any = 0) -> list[Any]:
            self.asked.append(host)
            return [{"hostname": host, "host": address, "port": port}]

        self.resolver._inner = cast(Any, SimpleNamespace(resolve=resolve))


FORBIDDING = TargetPolicy(forbidden=(ipaddress.ip_network("10.0.0.0/8"),))


@pytest.mark.parametrize("url", ["http://10.0.0.5/hook", "http://[::ffff:10.0.0.5]:8080/", "http://10.1/"])
async def test_a_forbidden_literal_address_is_refused_before_anything_is_sent(
    tmp_path: Path, url: str
) -> None:
    session = FakeSession(200)
    deliveries = _deliveries(tmp_path, session, resolver=CheckingResolver(FORBIDDING))
    record = await deliveries.attempt(HOOK.model_copy(update={"url": url}), "jobs", 1, "t", "e1", BODY, 1)
    assert session.posts == []
    assert (record.ok, record.refused, record.status) == (False, True, None)
    assert record.error.startswith("url's host ")
    assert "is in 10.0.0.0/8" in record.error


async def test_an_allowed_literal_address_is_posted_to(tmp_path: Path) -> None:
    session = FakeSession(200)
    deliveries = _with(tmp_path, session)
    deliveries.resolver = CheckingResolver(FORBIDDING)
    hook = HOOK.model_copy(update={"url": "http://192.0.2.5:8080/hook"})
    record = await deliveries.attempt(hook, "jobs", 1, "t", "e1", BODY, 1)
    assert [post["url"] for post in session.posts] == ["http://192.0.2.5:8080/hook"]
    assert (record.ok, record.refused) == (True, False)


async def test_a_named_host_is_left_to_the_clients_resolver(tmp_path: Path) -> None:
    # The session resolves it when it connects (checked there, once): no lookup before.
    session = FakeSession(200)
    deliveries = _with(tmp_path, session)
    resolving = Resolving(FORBIDDING, "10.0.0.9")
    deliveries.resolver = resolving.resolver
    record = await deliveries.attempt(HOOK, "jobs", 1, "t", "e1", BODY, 1)
    assert resolving.asked == []
    assert [post["url"] for post in session.posts] == [HOOK.url]
    assert record.ok
