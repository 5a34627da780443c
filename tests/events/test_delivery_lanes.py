"""Webhook deliveries' lanes over fakes, no bus: the durable consumer each followed stream gets
(its name, start, filter, acks and budget) and the consuming loop reading it, the gateway's start
(old shared consumers removed, a lane for every stored subscription), the watch that opens and
closes lanes as subscriptions come and go, a new subscription's id and start, and what a
consuming loop's handler delivers.

JetStream is a fake that records each consumer added and deleted; ``consume`` is replaced by a
loop that records what it was given and runs until its lane stops it; the buckets are in-memory
KV buckets whose watch is fed by the test.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import nats.errors
import orjson
import pytest
import structlog
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from libs.backbone.consuming import by_job_id
from libs.backbone.kv import ModelStore
from libs.backbone.provisioning import KVSpec
from services.events.adapters import delivering
from services.events.adapters.delivering import DELIVERIES, WEBHOOKS, Deliveries
from services.events.core.directory import JobDirectory
from services.events.core.webhooks import Attempt, Attempts, Webhook
from services.events.settings import EventsSettings
from tests.events.test_delivery_fakes import HOOK, NOW, FakeJS
from tests.support.fake_kv import FakeKV, FakeWatcher, entry, soon

LAST = {"jobs": 41, "nodes": 7, "alerts": 3, "marketplace": 12}


class LaneJS(FakeJS):
    """JetStream as the lanes use it: consumers added (each config recorded; a stream can be told
    to refuse), consumers deleted, and the gateway's two buckets in memory."""

    def __init__(self) -> None:
        super().__init__()
        self.added: list[tuple[str, ConsumerConfig]] = []
        self.add_errors: dict[str, BaseException] = {}
        self.buckets: dict[str, FakeKV] = {}
        self.delete_refusals: dict[str, BaseException] = {}

    async def add_consumer(self, stream: str, config: ConsumerConfig | None = None, **params: Any) -> Any:
        assert config is not None
        assert params == {}
        self.added.append((stream, config))
        if stream in self.add_errors:
            raise self.add_errors[stream]
        return SimpleNamespace(name=config.name, stream_name=stream, config=config)

    async def delete_consumer(self, stream: str, consumer: str) -> bool:
        if consumer in self.delete_refusals:
            self.deleted.append((stream, consumer))
            raise self.delete_refusals[consumer]
        return await super().delete_consumer(stream, consumer)

    async def key_value(self, bucket: str) -> Any:
        return self.bucket(bucket).as_kv()

    def bucket(self, name: str) -> FakeKV:
        return self.buckets.setdefault(name, FakeKV())


@dataclass
class Loop:
    """One consuming loop ``consume`` was asked to run."""

    js: Any
    stream: str
    durable: str
    handler: Any
    stop: asyncio.Event
    options: dict[str, Any]
    ended: asyncio.Event = field(default_factory=asyncio.Event)


@pytest.fixture
def loops(monkeypatch: pytest.MonkeyPatch) -> list[Loop]:
    """Each ``consume`` started, which runs until its ``stop`` is set."""
    started: list[Loop] = []

    async def consume(
        js: Any, stream: str, durable: str, handler: Any, *, stop: asyncio.Event, **options: Any
    ) -> None:
        loop = Loop(js, stream, durable, handler, stop, options)
        started.append(loop)
        try:
            await stop.wait()
        finally:
            loop.ended.set()

    monkeypatch.setattr(delivering, "consume", consume)
    return started


@pytest.fixture
def provisioned(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, KVSpec]]:
    """The buckets ``ensure_kv`` was asked for (the fake's buckets exist already)."""
    seen: list[tuple[Any, KVSpec]] = []

    async def ensure_kv(js: Any, spec: KVSpec, **options: Any) -> Any:
        seen.append((js, spec))
        return await js.key_value(spec.bucket)

    monkeypatch.setattr(delivering, "ensure_kv", ensure_kv)
    return seen


class LiveWatcher:
    """A KV watcher the test feeds: the "current values are all in" marker, then each entry put."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.queue.put_nowait(None)
        self._sub = self
        self.stops = 0
        self.unsubscribing = 0.0
        self.idle = asyncio.Event()

    async def consumer_info(self) -> Any:
        return SimpleNamespace(num_pending=0, delivered=SimpleNamespace(consumer_seq=0))

    async def stop(self) -> None:
        await asyncio.sleep(self.unsubscribing)  # a request to the server
        self.stops += 1

    def __aiter__(self) -> LiveWatcher:
        return self

    async def __anext__(self) -> Any:
        if self.queue.empty():
            self.idle.set()  # the watch handled every entry put and asks for the next
        return await self.queue.get()

    def put(self, key: str, hook: Webhook | None, revision: int) -> None:
        self.idle.clear()
        if hook is None:
            self.queue.put_nowait(entry(key, None, revision, operation="DEL"))
        else:
            self.queue.put_nowait(entry(key, hook.model_dump_json().encode(), revision))

    async def drained(self) -> None:
        """Once the watch took everything put and handled it (it waits for the next entry)."""
        await soon(self.idle.wait())


def stored(*hooks: Webhook) -> list[Any]:
    """What a bucket's watch gives for its current values (each entry's delta: those after it)."""
    return [
        entry(hook.id, hook.model_dump_json().encode(), number + 1, delta=len(hooks) - number - 1)
        for number, hook in enumerate(hooks)
    ]


def settings(tmp_path: Path, **values: Any) -> EventsSettings:
    return EventsSettings(
        nats_url="nats://127.0.0.1:9", rest_url="http://127.0.0.1:9", data_dir=tmp_path, **values
    )


def _deliveries(tmp_path: Path, **values: Any) -> Deliveries:
    hub = SimpleNamespace(directory=JobDirectory(), last=dict(LAST))
    found = Deliveries(
        cast(Any, LaneJS()), cast(Any, hub), cast(Any, None), settings(tmp_path, **values), cast(Any, None)
    )
    found.clock = lambda: NOW
    return found


def js_of(deliveries: Deliveries) -> LaneJS:
    return cast(LaneJS, deliveries.js)


def hook(hook_id: str = "h1", **changes: Any) -> Webhook:
    """A subscription to job.completed (one stream) unless ``changes`` say otherwise."""
    return HOOK.model_copy(update={"id": hook_id, "types": ("job.completed",), **changes})


class Tasks:
    """A task group's ``create_task``, the tasks kept: the test's end cancels what still runs and
    fails on a task that raised (as a task group would end the gateway)."""

    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[Any]] = []

    def create_task(self, coro: Any, *, name: str | None = None) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self.tasks.append(task)
        return task


@pytest.fixture
async def tasks() -> AsyncIterator[asyncio.TaskGroup]:
    group = Tasks()
    yield cast(asyncio.TaskGroup, group)
    for task in group.tasks:
        task.cancel()
    ended = await asyncio.gather(*group.tasks, return_exceptions=True)
    assert [
        e for e in ended if isinstance(e, BaseException) and not isinstance(e, asyncio.CancelledError)
    ] == []


async def opened(deliveries: Deliveries, tasks: asyncio.TaskGroup, *hooks: Webhook) -> None:
    deliveries._tasks = tasks
    for each in hooks:
        await soon(deliveries._open_lane(each))
    await asyncio.sleep(0)  # one turn: the tasks created run their first step (each consume starts)


async def closed(deliveries: Deliveries) -> None:
    lanes = list(deliveries._lanes.values())
    deliveries._lanes.clear()
    await soon(asyncio.gather(*(lane.close() for lane in lanes)))


# the consumers a lane creates -----------------------------------------------------------------


async def test_a_lane_creates_a_durable_consumer_per_followed_stream_starting_after_the_hooks_start(
    tmp_path: Path, tasks: asyncio.TaskGroup, loops: list[Loop]
) -> None:
    deliveries = _deliveries(tmp_path)
    subscription = hook(types=("job.completed", "alert.fired"), start={"jobs": 41, "alerts": 3})
    await opened(deliveries, tasks, subscription)
    js = js_of(deliveries)
    assert [stream for stream, _ in js.added] == ["PAI_JOBS", "PAI_ALERTS"]
    jobs, alerts = (config for _, config in js.added)
    assert jobs == ConsumerConfig(
        name="events-webhook-h1-jobs",
        durable_name="events-webhook-h1-jobs",
        description="webhook h1 of alice",
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=42,
        filter_subject="pai.job.>",
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=30.0,
        max_ack_pending=64,
    )
    assert (alerts.name, alerts.durable_name, alerts.opt_start_seq, alerts.filter_subject) == (
        "events-webhook-h1-alerts",
        "events-webhook-h1-alerts",
        4,
        "pai.alert.>",
    )
    assert (alerts.deliver_policy, alerts.ack_policy, alerts.ack_wait, alerts.max_ack_pending) == (
        DeliverPolicy.BY_START_SEQUENCE,
        AckPolicy.EXPLICIT,
        30.0,
        64,
    )
    await closed(deliveries)


async def test_a_stream_the_hook_has_no_start_for_is_read_from_its_first_event(
    tmp_path: Path, tasks: asyncio.TaskGroup, loops: list[Loop]
) -> None:
    deliveries = _deliveries(tmp_path)
    await opened(deliveries, tasks, hook(types=("node.lost",), start={"jobs": 41}))
    [(stream, config)] = js_of(deliveries).added
    assert (stream, config.opt_start_seq, config.filter_subject) == ("PAI_NODES", 1, "pai.node.>")
    await closed(deliveries)


@pytest.mark.parametrize(("budget", "pending"), [(1, 64), (64, 64), (65, 65), (200, 200)])
async def test_a_lanes_unacknowledged_messages_are_its_budget_and_never_fewer_than_64(
    tmp_path: Path, tasks: asyncio.TaskGroup, loops: list[Loop], budget: int, pending: int
) -> None:
    deliveries = _deliveries(tmp_path, webhook_concurrency=budget)
    await opened(deliveries, tasks, hook())
    [(_, config)] = js_of(deliveries).added
    assert config.max_ack_pending == pending
    [loop] = loops
    assert (loop.options["batch"], loop.options["max_in_flight"]) == (budget, budget)
    await closed(deliveries)


async def test_each_consumer_is_read_by_a_loop_of_the_lane_in_job_order_within_the_budget(
    tmp_path: Path, tasks: asyncio.TaskGroup, loops: list[Loop]
) -> None:
    deliveries = _deliveries(tmp_path, webhook_concurrency=5)
    await opened(deliveries, tasks, hook(types=("job.completed", "node.lost", "marketplace.item.created")))
    lane = deliveries._lanes["h1"]
    assert [(loop.stream, loop.durable) for loop in loops] == [
        ("PAI_JOBS", "events-webhook-h1-jobs"),
        ("PAI_NODES", "events-webhook-h1-nodes"),
        ("PAI_MARKETPLACE", "events-webhook-h1-marketplace"),
    ]
    for loop in loops:
        assert loop.js is deliveries.js
        assert loop.stop is lane.stop
        assert loop.options == {"key": by_job_id, "batch": 5, "max_in_flight": 5}
    assert len(lane.tasks) == 3
    assert not any(task.done() for task in lane.tasks)
    await soon(lane.close())
    assert all(loop.ended.is_set() for loop in loops)
    assert all(task.done() for task in lane.tasks)
    deliveries._lanes.clear()


async def test_each_loops_handler_delivers_its_own_streams_events_for_its_own_hook(
    tmp_path: Path, tasks: asyncio.TaskGroup, loops: list[Loop], monkeypatch: pytest.MonkeyPatch
) -> None:
    deliveries = _deliveries(tmp_path)
    delivered = recording(monkeypatch)
    admin = hook("h1", admin=True, types=("job.completed", "alert.fired"))
    other = hook("h2", admin=True, types=("job.completed",))
    deliveries.webhooks = {"h1": admin, "h2": other}
    await opened(deliveries, tasks, admin, other)
    by_durable = {loop.durable: loop for loop in loops}
    body = orjson.dumps({"type": "alert.fired", "event_id": "e9", "alert_id": "a1"})
    await soon(by_durable["events-webhook-h1-alerts"].handler(message(body, 5)))
    body2 = orjson.dumps({"type": "job.completed", "event_id": "e8", "job_id": "j1"})
    await soon(by_durable["events-webhook-h2-jobs"].handler(message(body2, 6)))
    assert [(call["hook"].id, call["stream"], call["sequence"]) for call in delivered] == [
        ("h1", "alerts", 5),
        ("h2", "jobs", 6),
    ]
    await closed(deliveries)


async def test_a_stream_whose_consumer_cannot_be_created_is_skipped_and_said_the_others_still_run(
    tmp_path: Path, tasks: asyncio.TaskGroup, loops: list[Loop]
) -> None:
    deliveries = _deliveries(tmp_path)
    js = js_of(deliveries)
    js.add_errors["PAI_NODES"] = nats.errors.TimeoutError()
    with structlog.testing.capture_logs() as logs:
        await opened(deliveries, tasks, hook(types=("job.completed", "node.lost", "alert.fired")))
    assert [stream for stream, _ in js.added] == ["PAI_JOBS", "PAI_NODES", "PAI_ALERTS"]
    assert [loop.durable for loop in loops] == ["events-webhook-h1-jobs", "events-webhook-h1-alerts"]
    assert len(deliveries._lanes["h1"].tasks) == 2
    assert logs == [
        {
            "event": "webhook consumer not created",
            "webhook": "h1",
            "stream": "nodes",
            "error": str(nats.errors.TimeoutError()),
            "log_level": "warning",
        }
    ]
    await closed(deliveries)


async def test_a_lane_is_opened_once_and_never_after_the_deliveries_stop(
    tmp_path: Path, tasks: asyncio.TaskGroup, loops: list[Loop]
) -> None:
    deliveries = _deliveries(tmp_path)
    await opened(deliveries, tasks, hook("h1"))
    first = deliveries._lanes["h1"]
    await opened(deliveries, tasks, hook("h1", url="https://elsewhere.example/"))
    assert deliveries._lanes["h1"] is first
    assert len(js_of(deliveries).added) == 1
    assert len(loops) == 1
    deliveries._stop.set()
    await opened(deliveries, tasks, hook("h2"))
    assert "h2" not in deliveries._lanes
    assert len(js_of(deliveries).added) == 1
    await closed(deliveries)


async def test_a_lane_opened_outside_start_says_start_opens_lanes(tmp_path: Path) -> None:
    deliveries = _deliveries(tmp_path)
    with pytest.raises(AssertionError, match=r"^start\(\) opens lanes in its task group$"):
        await deliveries._open_lane(hook())


# the gateway's start and stop -------------------------------------------------------------------


async def test_start_provisions_both_buckets_removes_the_old_consumers_and_opens_every_stored_lane(
    tmp_path: Path, loops: list[Loop], provisioned: list[tuple[Any, KVSpec]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delivering, "FLUSH_EVERY", 0.001)
    deliveries = _deliveries(tmp_path)
    js = js_of(deliveries)
    one = hook("h1", types=("job.completed",), start={"jobs": 10})
    two = hook("h2", owner="bob", types=("alert.fired",), start={"alerts": 2})
    webhooks = js.bucket("PAI_WEBHOOKS")
    for each in (one, two):
        webhooks.set(each.id, each.model_dump_json().encode())
    watcher = LiveWatcher()
    webhooks.watchers = [FakeWatcher(stored(one, two)), cast(Any, watcher)]
    js.delete_refusals["events-webhooks-nodes"] = NotFoundError()
    async with asyncio.TaskGroup() as tasks:
        await soon(deliveries.start(tasks))
        assert provisioned == [(js, WEBHOOKS), (js, DELIVERIES)]
        assert deliveries.store is not None
        assert deliveries.attempts is not None
        assert (deliveries.store.bucket, deliveries.attempts.bucket) == (
            "PAI_WEBHOOKS",
            "PAI_WEBHOOK_DELIVERIES",
        )
        assert deliveries.store._kv is cast(Any, js.bucket("PAI_WEBHOOKS"))
        assert deliveries.attempts._kv is cast(Any, js.bucket("PAI_WEBHOOK_DELIVERIES"))
        assert js.deleted == [
            ("PAI_JOBS", "events-webhooks-jobs"),
            ("PAI_NODES", "events-webhooks-nodes"),
            ("PAI_ALERTS", "events-webhooks-alerts"),
            ("PAI_MARKETPLACE", "events-webhooks-marketplace"),
        ]
        assert deliveries.webhooks == {"h1": one, "h2": two}
        assert sorted(deliveries._lanes) == ["h1", "h2"]
        assert [(stream, config.durable_name, config.opt_start_seq) for stream, config in js.added] == [
            ("PAI_JOBS", "events-webhook-h1-jobs", 11),
            ("PAI_ALERTS", "events-webhook-h2-alerts", 3),
        ]
        assert deliveries._watching is not None
        assert deliveries._watching.get_name() == "webhooks-watch"
        assert deliveries._flusher.get_name() == "webhooks-attempts"
        # the watch runs: a subscription created elsewhere gets its lane here
        three = hook("h3", types=("node.lost",))
        watcher.put("h3", three, 3)
        await watcher.drained()
        assert deliveries.webhooks["h3"] == three
        assert js.added[-1][1].durable_name == "events-webhook-h3-nodes"
        # the attempts' writer runs: an attempt recorded reaches the bucket
        written = asyncio.Event()
        js.bucket("PAI_WEBHOOK_DELIVERIES").script("create", lambda bucket: written.set())
        await deliveries._record("h1", attempt())
        await soon(written.wait())
        watcher.unsubscribing = 0.05
        await soon(deliveries.stop())
        assert watcher.stops == 1  # the watch ended before stop() returned
    assert all(loop.ended.is_set() for loop in loops)
    assert deliveries._lanes == {}
    stored_attempts = await deliveries.attempts.get("h1")
    assert stored_attempts is not None
    assert [a.delivery for a in stored_attempts.value.items] == ["d1"]


async def test_stop_closes_every_lane_and_writes_what_is_unwritten(
    tmp_path: Path, loops: list[Loop], provisioned: list[tuple[Any, KVSpec]]
) -> None:
    deliveries = _deliveries(tmp_path)
    js = js_of(deliveries)
    watcher = LiveWatcher()
    js.bucket("PAI_WEBHOOKS").watchers = [FakeWatcher([None]), cast(Any, watcher)]
    async with asyncio.TaskGroup() as tasks:
        await soon(deliveries.start(tasks))
        assert deliveries._lanes == {}
        await soon(deliveries.create(hook("ignored", types=("job.completed", "alert.fired"))))
        assert len(loops) == 2
        await deliveries._record("h9", attempt())
        await soon(deliveries.stop())
        watching = deliveries._watching
        assert watching is not None
        assert watching.done()
        assert deliveries._flusher.done()
    assert all(loop.ended.is_set() for loop in loops)
    assert deliveries._lanes == {}
    assert deliveries.attempts is not None
    written = await deliveries.attempts.get("h9")
    assert written is not None
    assert [a.delivery for a in written.value.items] == ["d1"]
    # stopped: a subscription created now gets no lane
    await soon(deliveries.create(hook("ignored")))
    assert len(loops) == 2


def attempt() -> Attempt:
    return Attempt(
        delivery="d1",
        type="job.completed",
        stream="jobs",
        sequence=7,
        attempt=1,
        status=200,
        ok=True,
        at=datetime(2026, 11, 28, 8, 0, tzinfo=UTC),
    )


# the watch ------------------------------------------------------------------------------------


async def watching(
    deliveries: Deliveries, tasks: asyncio.TaskGroup
) -> tuple[LiveWatcher, asyncio.Task[None]]:
    bucket = FakeKV()
    watcher = LiveWatcher()
    bucket.watchers = [cast(Any, watcher)]
    deliveries.store = ModelStore(bucket.as_kv(), Webhook, "PAI_WEBHOOKS")
    deliveries.attempts = ModelStore(FakeKV().as_kv(), Attempts, "PAI_WEBHOOK_DELIVERIES")
    deliveries._tasks = tasks
    return watcher, tasks.create_task(deliveries._watch())


async def test_the_watch_opens_a_lane_for_a_new_subscription_and_closes_it_when_deleted(
    tmp_path: Path, tasks: asyncio.TaskGroup, loops: list[Loop]
) -> None:
    deliveries = _deliveries(tmp_path)
    watcher, task = await watching(deliveries, tasks)
    new = hook("h1", types=("job.completed",), start={"jobs": 5})
    watcher.put("h1", new, 1)
    await watcher.drained()
    assert deliveries.webhooks == {"h1": new}
    lane = deliveries._lanes["h1"]
    [(stream, config)] = js_of(deliveries).added
    assert (stream, config.durable_name, config.opt_start_seq) == ("PAI_JOBS", "events-webhook-h1-jobs", 6)
    [loop] = loops
    assert not loop.ended.is_set()
    watcher.put("h1", None, 2)
    await watcher.drained()
    await soon(loop.ended.wait())
    assert lane.stop.is_set()
    assert deliveries.webhooks == {}
    assert deliveries._lanes == {}
    task.cancel()


async def test_the_watch_keeps_a_changed_subscription_and_its_one_lane(
    tmp_path: Path, tasks: asyncio.TaskGroup, loops: list[Loop]
) -> None:
    deliveries = _deliveries(tmp_path)
    watcher, task = await watching(deliveries, tasks)
    watcher.put("h1", hook("h1"), 1)
    await watcher.drained()
    lane = deliveries._lanes["h1"]
    failing = hook("h1", failing=True, last_error="HTTP 503")
    watcher.put("h1", failing, 2)
    await watcher.drained()
    assert deliveries.webhooks == {"h1": failing}
    assert deliveries._lanes == {"h1": lane}
    assert len(js_of(deliveries).added) == 1
    assert not lane.stop.is_set()
    task.cancel()
    await closed(deliveries)


async def test_the_watch_forgets_a_subscription_deleted_elsewhere_whatever_this_replica_knew(
    tmp_path: Path, tasks: asyncio.TaskGroup, loops: list[Loop]
) -> None:
    deliveries = _deliveries(tmp_path)
    watcher, task = await watching(deliveries, tasks)
    deliveries.webhooks["h2"] = hook("h2")  # known, but no lane here (its consumers failed)
    watcher.put("h9", None, 1)  # never known here
    watcher.put("h2", None, 2)
    watcher.put("h3", hook("h3"), 3)
    await watcher.drained()
    assert deliveries.webhooks == {"h3": hook("h3")}
    assert list(deliveries._lanes) == ["h3"]
    assert not task.done()
    task.cancel()
    await closed(deliveries)


# a new subscription -----------------------------------------------------------------------------


async def test_a_new_subscription_gets_a_fresh_id_and_starts_after_what_the_bus_holds_now(
    tmp_path: Path, tasks: asyncio.TaskGroup, loops: list[Loop]
) -> None:
    deliveries = _deliveries(tmp_path)
    deliveries.store = ModelStore(FakeKV().as_kv(), Webhook, "PAI_WEBHOOKS")
    deliveries._tasks = tasks
    asked = hook("chosen-by-caller", types=("job.completed", "alert.fired"), start={"jobs": 1})
    created = await soon(deliveries.create(asked))
    again = await soon(deliveries.create(asked))
    assert re.fullmatch(r"[0-9a-f]{32}", created.id)
    assert created.id != again.id
    assert created.start == LAST
    assert created == asked.model_copy(update={"id": created.id, "start": LAST})
    hub = cast(Any, deliveries.hub)
    hub.last["jobs"] = 99  # the bus moves on: the subscription keeps where it started
    assert created.start["jobs"] == 41
    found = await deliveries.store.get(created.id)
    assert found is not None
    assert found.value == created
    assert deliveries.webhooks[created.id] == created
    assert set(deliveries._lanes) == {created.id, again.id}
    configs = [
        (s, c.durable_name, c.opt_start_seq)
        for s, c in js_of(deliveries).added
        if created.id in (c.name or "")
    ]
    assert configs == [
        ("PAI_JOBS", f"events-webhook-{created.id}-jobs", 42),
        ("PAI_ALERTS", f"events-webhook-{created.id}-alerts", 4),
    ]
    await closed(deliveries)


# what a loop's handler delivers -------------------------------------------------------------------


def message(body: bytes, sequence: int, subject: str = "pai.job.j1.job.completed") -> Any:
    return SimpleNamespace(
        data=body, subject=subject, metadata=SimpleNamespace(sequence=SimpleNamespace(stream=sequence))
    )


def recording(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    async def deliver(
        self: Deliveries, hook: Webhook, stream: str, sequence: int, kind: str, event_id: str, body: bytes
    ) -> None:
        seen.append(
            {
                "hook": hook,
                "stream": stream,
                "sequence": sequence,
                "kind": kind,
                "event_id": event_id,
                "body": body,
            }
        )

    monkeypatch.setattr(Deliveries, "deliver", deliver)
    return seen


@pytest.fixture
def delivered(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    return recording(monkeypatch)


def submitted(directory: JobDirectory, job_id: str = "j1", user: str = "alice") -> None:
    directory.submitted(job_id, user, "train", "default")


async def test_an_event_the_subscription_wants_is_delivered_with_its_type_id_sequence_and_body(
    tmp_path: Path, delivered: list[dict[str, Any]]
) -> None:
    deliveries = _deliveries(tmp_path)
    submitted(cast(Any, deliveries.hub).directory)
    deliveries.webhooks["h1"] = HOOK
    body = orjson.dumps({"type": "job.completed", "job_id": "j1", "event_id": "e1"})
    await soon(deliveries._handler("h1", "jobs")(message(body, 17)))
    assert delivered == [
        {
            "hook": HOOK,
            "stream": "jobs",
            "sequence": 17,
            "kind": "job.completed",
            "event_id": "e1",
            "body": body,
        }
    ]


async def test_an_event_without_an_id_is_delivered_with_an_empty_one(
    tmp_path: Path, delivered: list[dict[str, Any]]
) -> None:
    deliveries = _deliveries(tmp_path)
    submitted(cast(Any, deliveries.hub).directory)
    deliveries.webhooks["h1"] = HOOK
    body = orjson.dumps({"type": "job.completed", "job_id": "j1"})
    await soon(deliveries._handler("h1", "jobs")(message(body, 3)))
    assert [call["event_id"] for call in delivered] == [""]


async def test_the_handler_reads_the_subscription_as_it_is_now(
    tmp_path: Path, delivered: list[dict[str, Any]]
) -> None:
    deliveries = _deliveries(tmp_path)
    submitted(cast(Any, deliveries.hub).directory)
    handle = deliveries._handler("h1", "jobs")
    deliveries.webhooks["h1"] = HOOK
    changed = hook("h1", url="https://moved.example/")
    deliveries.webhooks["h1"] = changed
    await soon(handle(message(orjson.dumps({"type": "job.completed", "job_id": "j1"}), 3)))
    assert [call["hook"] for call in delivered] == [changed]


@pytest.mark.parametrize(
    "state", ["deleted", "failing"], ids=["a deleted subscription", "a failing subscription"]
)
async def test_a_deleted_or_failing_subscription_is_delivered_nothing(
    tmp_path: Path, delivered: list[dict[str, Any]], state: str
) -> None:
    deliveries = _deliveries(tmp_path)
    directory = cast(Any, deliveries.hub).directory
    submitted(directory)
    if state == "failing":
        deliveries.webhooks["h1"] = hook("h1", failing=True)
    deliveries.webhooks["h2"] = hook("h2")
    body = orjson.dumps(
        {"type": "job.submitted", "job_id": "j2", "user": "alice", "name": "n", "virtual_cluster": "v"}
    )
    await soon(deliveries._handler("h1", "jobs")(message(body, 3)))
    assert delivered == []
    assert directory.job("j2") is None  # not even read


async def test_an_event_the_subscription_may_not_see_or_did_not_ask_for_is_skipped(
    tmp_path: Path, delivered: list[dict[str, Any]]
) -> None:
    deliveries = _deliveries(tmp_path)
    directory = cast(Any, deliveries.hub).directory
    submitted(directory, "j1", "alice")
    submitted(directory, "j2", "bob")
    deliveries.webhooks["h1"] = hook("h1", types=("job.completed",))
    handle = deliveries._handler("h1", "jobs")
    for body in (
        {"type": "job.completed", "job_id": "j2"},  # bob's job
        {"type": "job.started", "job_id": "j1"},  # not asked for
        {"type": "job.completed", "job_id": "j3"},  # a job the directory does not know
        {"type": "job.completed", "job_id": "j1", "event_id": "yes"},
    ):
        await soon(handle(message(orjson.dumps(body), 3)))
    assert [call["event_id"] for call in delivered] == ["yes"]


async def test_a_job_submitted_teaches_the_directory_before_it_is_filtered(
    tmp_path: Path, delivered: list[dict[str, Any]]
) -> None:
    deliveries = _deliveries(tmp_path)
    deliveries.webhooks["h1"] = HOOK
    body = orjson.dumps(
        {
            "type": "job.submitted",
            "job_id": "j5",
            "user": "alice",
            "name": "n",
            "virtual_cluster": "v",
            "event_id": "s",
        }
    )
    await soon(deliveries._handler("h1", "jobs")(message(body, 3)))
    assert [call["event_id"] for call in delivered] == ["s"]


async def test_an_item_event_older_than_what_the_directory_knows_changes_nothing(
    tmp_path: Path, delivered: list[dict[str, Any]]
) -> None:
    deliveries = _deliveries(tmp_path)
    directory = cast(Any, deliveries.hub).directory
    published = {"type": "marketplace.item.created", "item_id": "i1", "author": "carol"}
    directory.item_event("i1", {**published, "visibility": "public", "status": "approved"}, 10)
    deliveries.webhooks["h1"] = hook("h1", types=("marketplace.item.rejected",))
    handle = deliveries._handler("h1", "marketplace")
    rejected = {"type": "marketplace.item.rejected", "item_id": "i1", "author": "carol"}
    # a replay of an older rejection: the item is still public and approved, so alice may see it
    await soon(handle(message(orjson.dumps({**rejected, "event_id": "old"}), 5)))
    assert directory.item("i1").public
    # a newer one: the item is rejected, carol's alone, and alice is not told
    await soon(handle(message(orjson.dumps({**rejected, "event_id": "new"}), 11)))
    assert not directory.item("i1").public
    assert [(call["event_id"], call["stream"], call["sequence"]) for call in delivered] == [
        ("old", "marketplace", 5)
    ]
