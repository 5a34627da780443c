"""Webhook deliveries over fakes, no bus: the failing mark and its alert, the records' writes,
redelivery, a subscription's deletion and its lane's end, and the resolver that checks receivers.

The subscriptions and the attempts live in ModelStores over an in-memory KV bucket; events the
gateway publishes (its alerts) are caught where they leave, and a receiver is a fake HTTP
session that answers with the status a test gives.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import nats.errors
import pytest
import structlog
from nats.js.errors import NotFoundError

from libs.backbone.errors import KVConflictError
from libs.backbone.kv import ModelStore
from libs.protocol.events import AlertFired, AlertResolved, EventBase
from services.events.adapters import delivering
from services.events.adapters.delivering import AddressRefused, CheckingResolver, Deliveries, Lane, durable
from services.events.adapters.following import STREAM_NAMES
from services.events.core.webhooks import Attempt, Attempts, TargetPolicy, Webhook
from services.events.settings import EventsSettings
from tests.support.fake_kv import FakeKV, soon

NOW = datetime(2026, 11, 28, 22, 0, tzinfo=UTC)
HOOK = Webhook(
    id="h1",
    owner="alice",
    url="https://receiver.example/hook",
    secret="s3cret",
    created_at=datetime(2026, 11, 1, tzinfo=UTC),
)


class FakeJS:
    """What the deliveries ask of JetStream here: stored messages and consumers to delete."""

    def __init__(self) -> None:
        self.messages: dict[tuple[str, int], bytes | None] = {}
        self.deleted: list[tuple[str, str]] = []
        self.delete_errors: list[BaseException] = []

    async def get_msg(self, stream: str, seq: int) -> Any:
        return SimpleNamespace(data=self.messages[(stream, seq)])

    async def delete_consumer(self, stream: str, consumer: str) -> bool:
        self.deleted.append((stream, consumer))
        if self.delete_errors:
            raise self.delete_errors.pop(0)
        return True


class Answer:
    def __init__(self, status: int) -> None:
        self.status = status

    async def __aenter__(self) -> Answer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


class FakeSession:
    """A receiver answering each POST with the next status."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.posts: list[dict[str, Any]] = []

    def post(self, url: str, **options: Any) -> Answer:
        self.posts.append({"url": url, **options})
        return Answer(self.statuses.pop(0))


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, EventBase]]:
    seen: list[tuple[Any, EventBase]] = []

    async def publish_event(js: Any, event: EventBase, **options: Any) -> None:
        seen.append((js, event))

    monkeypatch.setattr(delivering, "publish_event", publish_event)
    return seen


def _deliveries(
    tmp_path: Path,
    session: FakeSession | None = None,
    kept: int = 100,
    resolver: CheckingResolver | None = None,
) -> Deliveries:
    config = EventsSettings(
        nats_url="nats://127.0.0.1:9",
        rest_url="http://127.0.0.1:9",
        data_dir=tmp_path,
        webhook_deliveries_kept=kept,
    )
    found = Deliveries(cast(Any, FakeJS()), cast(Any, None), cast(Any, session), config, cast(Any, resolver))
    found.store = ModelStore(FakeKV().as_kv(), Webhook, "PAI_WEBHOOKS")
    found.attempts = ModelStore(FakeKV().as_kv(), Attempts, "PAI_WEBHOOK_DELIVERIES")
    found.clock = lambda: NOW
    return found


@pytest.fixture
def deliveries(tmp_path: Path) -> Deliveries:
    return _deliveries(tmp_path)


def _kv(store: ModelStore[Any] | None) -> FakeKV:
    assert store is not None
    return cast(FakeKV, store._kv)


def attempt(number: int, delivery: str = "d1", ok: bool = False, sequence: int = 7) -> Attempt:
    return Attempt(
        delivery=delivery,
        type="job.completed",
        stream="jobs",
        sequence=sequence,
        attempt=number,
        status=200 if ok else 503,
        ok=ok,
        at=datetime(2026, 11, 28, 8, 0, number, tzinfo=UTC),
    )


# the failing mark and its alert -------------------------------------------------------------


async def test_a_failing_subscription_is_marked_and_fires_a_webhook_failing_warning(
    deliveries: Deliveries, published: list[tuple[Any, EventBase]]
) -> None:
    assert deliveries.store is not None
    await deliveries.store.create("h1", HOOK)
    await soon(deliveries._mark(HOOK, failing=True, error="HTTP 503"))
    stored = await deliveries.store.get("h1")
    assert stored is not None
    assert (stored.value.failing, stored.value.failing_since, stored.value.last_error) == (
        True,
        NOW,
        "HTTP 503",
    )
    assert deliveries.webhooks["h1"] == stored.value
    [(js, event)] = published
    assert js is deliveries.js
    assert isinstance(event, AlertFired)
    assert (event.alert_id, event.name, event.severity) == ("webhook-h1", "WebhookFailing", "warning")
    assert event.labels == {"webhook": "h1", "username": "alice"}
    assert event.summary == (
        "webhook h1 to https://receiver.example/hook is failing, its deliveries stopped: HTTP 503"
    )


async def test_a_subscription_taken_back_is_unmarked_and_its_alert_resolved(
    deliveries: Deliveries, published: list[tuple[Any, EventBase]]
) -> None:
    assert deliveries.store is not None
    failing = HOOK.model_copy(update={"failing": True, "failing_since": NOW, "last_error": "HTTP 503"})
    await deliveries.store.create("h1", failing)
    await soon(deliveries._mark(failing, failing=False))
    stored = await deliveries.store.get("h1")
    assert stored is not None
    assert (stored.value.failing, stored.value.failing_since, stored.value.last_error) == (False, None, "")
    assert deliveries.webhooks["h1"] == stored.value
    [(js, event)] = published
    assert js is deliveries.js
    assert isinstance(event, AlertResolved)
    assert (event.alert_id, event.name, event.labels) == (
        "webhook-h1",
        "WebhookFailing",
        {"webhook": "h1", "username": "alice"},
    )


async def test_a_deleted_subscription_is_neither_marked_nor_alerted(
    deliveries: Deliveries, published: list[tuple[Any, EventBase]]
) -> None:
    await soon(deliveries._mark(HOOK, failing=True, error="HTTP 503"))
    assert published == []
    assert deliveries.webhooks == {}
    assert [c[0] for c in _kv(deliveries.store).calls] == ["get"]


async def test_a_mark_another_replica_wrote_first_still_alerts_but_keeps_its_version(
    deliveries: Deliveries, published: list[tuple[Any, EventBase]]
) -> None:
    assert deliveries.store is not None
    await deliveries.store.create("h1", HOOK)
    other = HOOK.model_copy(update={"last_error": "another replica's"})
    kv = _kv(deliveries.store)
    kv.script("update", lambda bucket: bucket.set("h1", other.model_dump_json().encode()))
    await soon(deliveries._mark(HOOK, failing=True, error="HTTP 503"))
    stored = await deliveries.store.get("h1")
    assert stored is not None
    assert stored.value == other
    assert "h1" not in deliveries.webhooks
    assert [type(event) for _, event in published] == [AlertFired]


# the records' writes ------------------------------------------------------------------------


async def test_new_attempts_are_created_then_added_to_what_is_stored_keeping_the_last_ones(
    tmp_path: Path,
) -> None:
    deliveries = _deliveries(tmp_path, kept=3)
    assert deliveries.attempts is not None
    pending = {"h1": [attempt(1), attempt(2)]}
    await soon(deliveries._write(pending))
    assert pending == {}
    pending = {"h1": [attempt(3), attempt(4)], "h2": [attempt(1)]}
    await soon(deliveries._write(pending))
    assert pending == {}
    calls = [c[0] for c in _kv(deliveries.attempts).calls]
    assert calls == ["get", "create", "get", "update", "get", "create"]
    h1 = await deliveries.attempts.get("h1")
    h2 = await deliveries.attempts.get("h2")
    assert h1 is not None
    assert h2 is not None
    assert [a.attempt for a in h1.value.items] == [2, 3, 4]
    assert [a.attempt for a in h2.value.items] == [1]


async def test_a_write_another_replica_got_in_first_reads_again_and_adds_to_it(
    deliveries: Deliveries,
) -> None:
    assert deliveries.attempts is not None
    await deliveries.attempts.create("h1", Attempts(items=(attempt(1),)))
    theirs = Attempts(items=(attempt(1), attempt(2, "d2"))).model_dump_json().encode()
    _kv(deliveries.attempts).script("update", lambda bucket: bucket.set("h1", theirs))
    pending = {"h1": [attempt(3)]}
    await soon(deliveries._write(pending))
    assert pending == {}
    found = await deliveries.attempts.get("h1")
    assert found is not None
    assert [(a.delivery, a.attempt) for a in found.value.items] == [("d1", 1), ("d2", 2), ("d1", 3)]


async def test_attempts_still_contended_after_twenty_reads_are_kept_and_said(
    deliveries: Deliveries, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert deliveries.attempts is not None
    tries: list[str] = []

    async def contended(key: str, value: Any) -> int:
        tries.append(key)
        raise KVConflictError("PAI_WEBHOOK_DELIVERIES", key, None)

    monkeypatch.setattr(deliveries.attempts, "create", contended)
    pending = {"h1": [attempt(1), attempt(2)]}
    with structlog.testing.capture_logs() as logs:
        await soon(deliveries._write(pending))
    assert len(tries) == 20
    assert pending == {"h1": [attempt(1), attempt(2)]}
    assert logs == [
        {
            "event": "delivery attempts not recorded yet; kept for the next write",
            "webhook": "h1",
            "attempts": 2,
            "log_level": "warning",
        }
    ]


async def test_attempts_being_written_are_still_shown_then_shown_once_from_the_bucket(
    deliveries: Deliveries, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = deliveries.attempts
    assert store is not None
    writing, release = asyncio.Event(), asyncio.Event()
    create = store.create

    async def slow_create(key: str, value: Any) -> int:
        writing.set()
        await release.wait()
        return await create(key, value)

    monkeypatch.setattr(store, "create", slow_create)
    await deliveries._record("h1", attempt(1))
    await deliveries._record("h1", attempt(2))
    flushing = asyncio.create_task(deliveries.flush())
    await soon(writing.wait())
    assert [a.attempt for a in await deliveries.recent("h1")] == [1, 2]  # out of the unwritten, not in KV
    await deliveries._record("h1", attempt(3))
    assert [a.attempt for a in await deliveries.recent("h1")] == [1, 2, 3]
    release.set()
    await soon(flushing)
    assert deliveries._writing == {}
    assert [a.attempt for a in await deliveries.recent("h1")] == [1, 2, 3]


async def test_attempts_a_failed_write_held_go_back_ahead_of_those_recorded_while_it_was_written(
    deliveries: Deliveries, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert deliveries.attempts is not None

    async def failing(key: str, value: Any) -> int:
        await deliveries._record("h1", attempt(3))  # a delivery ends meanwhile
        raise nats.errors.TimeoutError

    monkeypatch.setattr(deliveries.attempts, "create", failing)
    await deliveries._record("h1", attempt(1))
    await deliveries._record("h1", attempt(2))
    with pytest.raises(nats.errors.TimeoutError):
        await soon(deliveries.flush())
    assert {key: [a.attempt for a in held] for key, held in deliveries._unwritten.items()} == {
        "h1": [1, 2, 3]
    }
    assert deliveries._writing == {}
    assert deliveries._dirty.is_set()


async def test_the_writer_says_a_failed_write_and_writes_the_attempts_once_the_bus_is_back(
    deliveries: Deliveries, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delivering, "FLUSH_EVERY", 0.001)
    assert deliveries.attempts is not None
    written = asyncio.Event()
    _kv(deliveries.attempts).script("create", nats.errors.TimeoutError(), lambda bucket: written.set())
    with structlog.testing.capture_logs() as logs:
        writer = asyncio.create_task(deliveries._flush_forever())
        await deliveries._record("h1", attempt(1))
        await soon(written.wait())  # the second write (stored as the writer resumes)
        deliveries._stop.set()
        deliveries._dirty.set()
        await soon(writer)  # stopped: it ends after its next round
    found = await deliveries.attempts.get("h1")
    assert found is not None
    assert [a.attempt for a in found.value.items] == [1]
    assert logs == [
        {
            "event": "delivery attempts not recorded yet; the bus failed",
            "error": repr(nats.errors.TimeoutError()),
            "log_level": "warning",
        }
    ]


# redelivery ---------------------------------------------------------------------------------


async def test_a_redelivery_sends_the_stored_event_again_as_the_next_attempt(tmp_path: Path) -> None:
    session = FakeSession(200)
    deliveries = _deliveries(tmp_path, session)
    js = cast(FakeJS, deliveries.js)
    js.messages[(STREAM_NAMES["jobs"], 9)] = b'{"event_id": "d1"}'
    await deliveries._record("h1", attempt(1, sequence=9))
    await deliveries._record("h1", attempt(2, "d2", sequence=10))
    await deliveries._record("h1", attempt(3, sequence=9))
    record = await soon(deliveries.redeliver(HOOK, "d1"))
    assert record is not None
    assert (record.delivery, record.stream, record.sequence, record.type, record.attempt, record.ok) == (
        "d1",
        "jobs",
        9,
        "job.completed",
        4,
        True,
    )
    [post] = session.posts
    assert post["url"] == HOOK.url
    assert post["data"] == b'{"event_id": "d1"}'
    assert post["allow_redirects"] is False
    assert post["headers"]["X-PAI-Delivery"] == "d1"
    assert post["headers"]["X-PAI-Event"] == "job.completed"
    assert (await deliveries.recent("h1"))[-1] == record


async def test_a_redelivery_of_an_unknown_delivery_sends_nothing(tmp_path: Path) -> None:
    session = FakeSession()
    deliveries = _deliveries(tmp_path, session)
    await deliveries._record("h1", attempt(1))
    assert await soon(deliveries.redeliver(HOOK, "d9")) is None
    assert session.posts == []


async def test_a_redelivery_that_succeeds_takes_a_failing_subscription_back(
    tmp_path: Path, published: list[tuple[Any, EventBase]]
) -> None:
    session = FakeSession(204)
    deliveries = _deliveries(tmp_path, session)
    assert deliveries.store is not None
    failing = HOOK.model_copy(update={"failing": True, "failing_since": NOW, "last_error": "HTTP 503"})
    await deliveries.store.create("h1", failing)
    cast(FakeJS, deliveries.js).messages[(STREAM_NAMES["jobs"], 7)] = None  # no body
    await deliveries._record("h1", attempt(1))
    record = await soon(deliveries.redeliver(failing, "d1"))
    assert record is not None
    assert record.ok
    assert session.posts[0]["data"] == b""
    stored = await deliveries.store.get("h1")
    assert stored is not None
    assert stored.value.failing is False
    assert [type(event) for _, event in published] == [AlertResolved]


async def test_a_redelivery_that_fails_or_of_a_working_subscription_marks_nothing(
    tmp_path: Path, published: list[tuple[Any, EventBase]]
) -> None:
    session = FakeSession(503, 200)
    deliveries = _deliveries(tmp_path, session)
    assert deliveries.store is not None
    failing = HOOK.model_copy(update={"failing": True})
    await deliveries.store.create("h1", failing)
    cast(FakeJS, deliveries.js).messages[(STREAM_NAMES["jobs"], 7)] = b"{}"
    await deliveries._record("h1", attempt(1))
    failed = await soon(deliveries.redeliver(failing, "d1"))
    assert failed is not None
    assert not failed.ok
    assert failed.error == "HTTP 503"
    ok = await soon(deliveries.redeliver(HOOK, "d1"))  # not failing: nothing to take back
    assert ok is not None
    assert ok.ok
    assert ok.attempt == 3
    assert published == []
    stored = await deliveries.store.get("h1")
    assert stored is not None
    assert stored.value.failing is True


# deletion and lanes -------------------------------------------------------------------------


async def test_deleting_a_subscription_removes_it_its_records_its_lane_and_its_consumers(
    deliveries: Deliveries,
) -> None:
    assert deliveries.store is not None
    assert deliveries.attempts is not None
    hook = HOOK.model_copy(update={"types": ("job.completed", "alert.fired")})
    await deliveries.store.create("h1", hook)
    await deliveries.attempts.create("h1", Attempts(items=(attempt(1),)))
    deliveries.webhooks["h1"] = hook
    lane = deliveries._lanes["h1"] = Lane()
    await soon(deliveries.delete("h1"))
    assert await deliveries.store.get("h1") is None
    assert await deliveries.attempts.get("h1") is None
    assert deliveries.webhooks == {}
    assert deliveries._lanes == {}
    assert lane.stop.is_set()
    assert cast(FakeJS, deliveries.js).deleted == [
        (STREAM_NAMES[stream], durable("h1", stream)) for stream in hook.filter.streams()
    ]
    assert sorted(hook.filter.streams()) == ["alerts", "jobs"]


async def test_deleting_a_subscription_whose_records_cannot_be_removed_still_deletes_it(
    deliveries: Deliveries,
) -> None:
    assert deliveries.store is not None
    assert deliveries.attempts is not None
    await deliveries.store.create("h1", HOOK)
    _kv(deliveries.attempts).script("delete", nats.errors.TimeoutError())
    deliveries.webhooks["h1"] = HOOK
    await soon(deliveries.delete("h1"))
    assert await deliveries.store.get("h1") is None
    assert deliveries.webhooks == {}
    assert cast(FakeJS, deliveries.js).deleted == [
        (STREAM_NAMES[stream], durable("h1", stream)) for stream in HOOK.filter.streams()
    ]


async def test_deleting_a_subscription_this_replica_does_not_know_closes_nothing(
    deliveries: Deliveries,
) -> None:
    assert deliveries.store is not None
    await deliveries.store.create("h1", HOOK)
    await soon(deliveries.delete("h1"))
    assert await deliveries.store.get("h1") is None
    assert cast(FakeJS, deliveries.js).deleted == []


async def test_closing_a_lane_deletes_each_consumer_even_when_some_are_gone(deliveries: Deliveries) -> None:
    js = cast(FakeJS, deliveries.js)
    js.delete_errors = [NotFoundError(), nats.errors.Error("bus away")]
    hook = HOOK.model_copy(update={"types": ("job.completed", "alert.fired", "node.lost")})
    await soon(deliveries._close_lane(hook))  # no lane here: its consumers all the same
    assert js.deleted == [(STREAM_NAMES[s], durable("h1", s)) for s in hook.filter.streams()]
    assert len(js.deleted) == 3


async def test_closing_a_lane_gives_its_loops_one_second(
    deliveries: Deliveries, monkeypatch: pytest.MonkeyPatch
) -> None:
    given: list[float] = []

    async def close(self: Lane, patience: float = 10.0) -> None:
        given.append(patience)

    monkeypatch.setattr(Lane, "close", close)
    deliveries._lanes["h1"] = Lane()
    await soon(deliveries._close_lane(HOOK))
    assert given == [1.0]
    assert deliveries._lanes == {}


async def test_a_lane_stops_its_loops_and_cancels_those_that_outlast_its_patience() -> None:
    lane = Lane()
    ended: list[str] = []

    async def obeys() -> None:
        await lane.stop.wait()
        await asyncio.sleep(0.01)  # a loop finishing what it holds: waited for, not cancelled
        ended.append("obeys")

    async def ignores() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise

    async def fails() -> None:
        await lane.stop.wait()
        raise RuntimeError("a loop's own error")

    lane.tasks = [asyncio.create_task(obeys()), asyncio.create_task(ignores()), asyncio.create_task(fails())]
    await asyncio.sleep(0)
    await soon(lane.close(patience=0.05))
    assert lane.stop.is_set()
    assert sorted(ended) == ["cancelled", "obeys"]
    assert all(task.done() for task in lane.tasks)
    assert not lane.tasks[0].cancelled()


async def test_a_lane_whose_loops_end_in_time_is_not_held_for_its_patience() -> None:
    lane = Lane()

    async def obeys() -> None:
        await lane.stop.wait()

    lane.tasks = [asyncio.create_task(obeys())]
    await asyncio.wait_for(lane.close(patience=60.0), 5.0)
    assert lane.tasks[0].done()
    assert not lane.tasks[0].cancelled()


# the resolver -------------------------------------------------------------------------------


def _resolver(policy: TargetPolicy | None = None) -> CheckingResolver:
    return CheckingResolver(policy or TargetPolicy())


async def test_a_literal_address_resolves_to_itself_numerically() -> None:
    resolver = _resolver()
    assert await resolver.resolve("10.1.2.3", 8080) == [
        {
            "hostname": "10.1.2.3",
            "host": "10.1.2.3",
            "port": 8080,
            "family": socket.AF_INET,
            "proto": 0,
            "flags": socket.AI_NUMERICHOST,
        }
    ]
    [v6] = await resolver.resolve("[fd00::1]", 443, socket.AF_INET6)
    assert (v6["host"], v6["family"], v6["port"]) == ("fd00::1", socket.AF_INET6, 443)
    await resolver.close()


@pytest.mark.parametrize(
    ("family", "hosts"),
    [
        (socket.AF_INET, ["127.0.0.1"]),
        (socket.AF_INET6, ["::1"]),
        (socket.AF_UNSPEC, ["127.0.0.1", "::1"]),
    ],
)
async def test_a_localhost_name_is_loopback_whatever_the_resolver_says(
    family: socket.AddressFamily, hosts: list[str]
) -> None:
    resolver = _resolver()
    found = await resolver.resolve("api.localhost.", 80, family)
    assert [info["host"] for info in found] == hosts
    assert {info["hostname"] for info in found} == {"api.localhost."}
    assert all(info["flags"] == socket.AI_NUMERICHOST for info in found)
    assert {info["port"] for info in found} == {80}
    await resolver.close()


async def test_a_name_resolving_to_a_forbidden_address_is_refused_naming_the_host_and_the_rule() -> None:
    policy = TargetPolicy(forbidden=(ipaddress.ip_network("10.0.0.0/8"),))
    resolver = _resolver(policy)
    asked: list[tuple[str, int, socket.AddressFamily]] = []

    async def resolve(host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[Any]:
        asked.append((host, port, family))
        return [{"hostname": host, "host": "192.0.2.1", "port": port}, {"hostname": host, "host": "10.9.9.9"}]

    resolver._inner = cast(Any, SimpleNamespace(resolve=resolve))
    with pytest.raises(AddressRefused) as refused:
        await resolver.resolve("receiver.example", 8443, socket.AF_UNSPEC)
    assert str(refused.value) == (
        "url's host receiver.example is refused: 10.9.9.9 is in 10.0.0.0/8, a range webhooks may not reach"
        " (rule PAI_WEBHOOK_FORBIDDEN_NETWORKS)."
    )
    assert asked == [("receiver.example", 8443, socket.AF_UNSPEC)]
    with pytest.raises(AddressRefused, match=r"^url's host 10\.1\.1\.1 is refused: 10\.1\.1\.1 is in"):
        await resolver.resolve("10.1.1.1", 80)


async def test_a_name_resolving_to_allowed_addresses_is_returned_as_resolved() -> None:
    resolver = _resolver(TargetPolicy(forbidden=(ipaddress.ip_network("10.0.0.0/8"),)))
    infos = [{"hostname": "r.example", "host": "192.0.2.1", "port": 80}]

    async def resolve(host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[Any]:
        return infos

    resolver._inner = cast(Any, SimpleNamespace(resolve=resolve))
    assert await resolver.resolve("r.example", 80) == infos


async def test_a_literal_address_without_a_port_resolves_with_port_zero() -> None:
    [info] = await _resolver().resolve("192.0.2.7")
    assert (info["host"], info["port"], info["family"]) == ("192.0.2.7", 0, socket.AF_INET)


async def test_the_platforms_own_port_on_this_machine_is_refused_by_port() -> None:
    resolver = _resolver(TargetPolicy(own_ports=frozenset({8443})))
    with pytest.raises(AddressRefused) as refused:
        await resolver.resolve("localhost", 8443)
    assert str(refused.value) == (
        "url's host localhost is refused: 127.0.0.1 port 8443 is one of this platform's own ports (its API,"
        " portal, metrics or NATS; rule PAI_WEBHOOK_FORBIDDEN_PORTS)."
    )
    assert [info["port"] for info in await resolver.resolve("localhost", 8080)] == [8080]


class Recording:
    """A system resolver that records each lookup: answers ``addresses``, or raises ``error``."""

    def __init__(self, *addresses: str, error: OSError | None = None) -> None:
        self.addresses = addresses
        self.error = error
        self.asked: list[tuple[str, int, socket.AddressFamily]] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[Any]:
        self.asked.append((host, port, family))
        if self.error is not None:
            raise self.error
        return [{"hostname": host, "host": address, "port": port} for address in self.addresses]


FORBIDDING = TargetPolicy(forbidden=(ipaddress.ip_network("10.0.0.0/8"),))


async def test_a_receivers_name_is_checked_for_every_address_family_at_the_urls_port() -> None:
    resolver = _resolver(FORBIDDING)
    system = Recording("192.0.2.1", "2001:db8::1")
    resolver._inner = cast(Any, system)
    await delivering.check_target("https://receiver.example/hook", resolver)
    await delivering.check_target("http://receiver.example:8080/hook", resolver)
    await delivering.check_target("http://receiver.example/hook", resolver)
    assert system.asked == [
        ("receiver.example", 443, socket.AF_UNSPEC),
        ("receiver.example", 8080, socket.AF_UNSPEC),
        ("receiver.example", 80, socket.AF_UNSPEC),
    ]


async def test_a_receiver_resolving_to_a_forbidden_address_is_refused_and_one_not_resolving_let_through() -> (
    None
):
    resolver = _resolver(FORBIDDING)
    resolver._inner = cast(Any, Recording("192.0.2.1", "10.0.0.7"))
    with pytest.raises(AddressRefused, match=r"^url's host receiver\.example is refused: 10\.0\.0\.7 is in"):
        await delivering.check_target("https://receiver.example/hook", resolver)
    with pytest.raises(AddressRefused, match=r"^url's host 10\.2\.3\.4 is refused"):
        await delivering.check_target("https://10.2.3.4/hook", resolver)
    unknown = Recording(error=socket.gaierror("Name or service not known"))
    resolver._inner = cast(Any, unknown)
    await delivering.check_target("https://not-yet.example/hook", resolver)  # checked at each delivery
    assert [host for host, _, _ in unknown.asked] == ["not-yet.example"]


async def test_the_receivers_client_resolves_through_the_checking_resolver_without_a_shared_limit() -> None:
    resolver = _resolver()
    session = delivering.receivers_session(resolver)
    try:
        connector = session.connector
        assert connector is not None
        assert connector.limit == 0  # aiohttp's "no limit"
        assert cast(Any, connector)._resolver is resolver
    finally:
        await session.close()


async def test_recent_attempts_are_the_stored_then_those_being_written_then_the_unwritten_each_once(
    tmp_path: Path,
) -> None:
    deliveries = _deliveries(tmp_path, kept=100)
    assert deliveries.attempts is not None
    await deliveries.attempts.create("h1", Attempts(items=(attempt(1), attempt(2))))
    deliveries._writing = {"h1": [attempt(2), attempt(3)], "h2": [attempt(9)]}
    deliveries._unwritten = {"h1": [attempt(4)]}
    assert [a.attempt for a in await deliveries.recent("h1")] == [1, 2, 3, 4]
    assert await deliveries.recent("h3") == []
    deliveries._writing = {}
    assert [a.attempt for a in await deliveries.recent("h1")] == [1, 2, 4]
    kept = _deliveries(tmp_path, kept=2)
    kept.attempts = deliveries.attempts
    kept._unwritten = {"h1": [attempt(4)]}
    assert [a.attempt for a in await kept.recent("h1")] == [2, 4]
