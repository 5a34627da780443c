"""The lease (libs/backbone/leasing.py) over an in-memory bucket: the race with another candidate,
a renewal that fails and is tried again, how long a holder counts on its lease, and how `lead`
and `while_leading` hand the lease over."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, MutableMapping
from typing import Any

import nats.errors
import pytest
from nats.js.errors import KeyWrongLastSequenceError
from structlog.testing import capture_logs

from libs.backbone import leasing
from libs.backbone.leasing import RENEW_EVERY, STANDBY_POLL, TTL, Lease, LeaseLost, lead, while_leading
from tests.support.fake_kv import HANG, PASS, FakeKV, soon


class Clock:
    """The lease's clock (leasing._now), moved by hand."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def at(self, now: float) -> None:
        self.now = now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(leasing, "_now", clock)
    return clock


def events(logs: list[MutableMapping[str, Any]], event: str) -> list[MutableMapping[str, Any]]:
    return [log for log in logs if log["event"] == event]


def loop_time() -> float:
    return asyncio.get_running_loop().time()


# The lease's arithmetic: how long a holder counts on it.


def test_a_holder_lets_go_half_a_renewal_before_the_ttl_and_never_more_than_a_second_before() -> None:
    kv = FakeKV().as_kv()
    assert Lease(kv, "k", "h", renew_every=2.0, ttl=6.0).hold == 5.0
    assert Lease(kv, "k", "h", renew_every=0.4, ttl=1.0).hold == pytest.approx(0.8)
    assert Lease(kv, "k", "h", renew_every=4.0, ttl=12.0).hold == 11.0
    default = Lease(kv, "k", "h")
    assert (default.renew_every, default.poll, default.hold) == (RENEW_EVERY, STANDBY_POLL, TTL - 1.0)
    assert (default.revision, default.epoch, default.renewed_at) == (None, None, 0.0)


async def test_the_time_left_counts_down_from_the_request_that_renewed_it(clock: Clock) -> None:
    bucket = FakeKV()
    lease = Lease(bucket.as_kv(), "k", "h", renew_every=2.0, ttl=6.0)
    clock.at(1.0)
    assert lease.left() == 0.0  # not acquired: nothing is held, whatever the clock says
    assert not lease.held()
    clock.at(100.0)
    bucket.script("create", lambda _: clock.at(100.3))  # the answer takes 0.3 s
    assert await soon(lease.acquire(asyncio.Event()))
    assert lease.renewed_at == 100.0
    clock.at(101.0)
    assert lease.left() == pytest.approx(4.0)
    assert lease.held()
    clock.at(104.99)
    assert lease.held()
    clock.at(105.0)
    assert lease.left() == 0.0
    assert not lease.held()
    clock.at(107.0)
    assert lease.left() == 0.0


# Acquiring: free, its own, another's, a race.


async def test_a_free_lease_is_created_and_the_revision_it_got_is_the_epoch() -> None:
    bucket = FakeKV()
    bucket.set("other", b"x")
    bucket.set("other", b"y")
    lease = Lease(bucket.as_kv(), "k", "holder-0")
    with capture_logs() as logs:
        assert await soon(lease.acquire(asyncio.Event()))
    assert (lease.revision, lease.epoch) == (3, 3)
    assert bucket.value("k") == b"holder-0"
    assert events(logs, "lease acquired") == [
        {"event": "lease acquired", "key": "k", "holder": "holder-0", "epoch": 3, "log_level": "info"}
    ]


async def test_a_deleted_lease_or_one_without_a_value_is_created_again() -> None:
    for leave in ("deleted", "empty"):
        bucket = FakeKV()
        bucket.set("k", b"gone")
        if leave == "deleted":
            await bucket.delete("k")
        else:
            bucket.set("k", None)
        lease = Lease(bucket.as_kv(), "k", "h")
        assert await soon(lease.acquire(asyncio.Event()))
        assert bucket.calls[-1] == ("create", "k", b"h", None), leave
        assert lease.epoch == 3


async def test_an_instance_restarted_under_its_name_takes_its_lease_back_from_the_stored_revision() -> None:
    bucket = FakeKV()
    stored = bucket.set("k", b"h")
    lease = Lease(bucket.as_kv(), "k", "h")
    assert await soon(lease.acquire(asyncio.Event()))
    assert bucket.calls[-1] == ("update", "k", b"h", stored)
    assert lease.epoch == lease.revision == stored + 1


async def test_a_standby_polls_another_holder_s_lease_and_says_so_once() -> None:
    bucket = FakeKV()
    bucket.set("k", b"other")
    gets: list[float] = []
    bucket.script(
        "get",
        lambda _: gets.append(loop_time()),
        lambda _: gets.append(loop_time()),
        lambda kv: kv.entries.pop("k") and None,  # expired
    )
    lease = Lease(bucket.as_kv(), "k", "h", poll=0.05)
    with capture_logs() as logs:
        assert await soon(lease.acquire(asyncio.Event()))
    assert events(logs, "standing by; another instance holds the lease") == [
        {
            "event": "standing by; another instance holds the lease",
            "key": "k",
            "holder": "other",
            "log_level": "info",
        }
    ]
    assert gets[1] - gets[0] >= 0.05
    assert lease.epoch == 2
    assert bucket.value("k") == b"h"


async def test_a_standby_told_to_stop_gives_up_without_the_lease() -> None:
    bucket = FakeKV()
    bucket.set("k", b"other")
    stop = asyncio.Event()
    bucket.script("get", lambda _: stop.set())
    lease = Lease(bucket.as_kv(), "k", "h", poll=30.0)
    assert await soon(lease.acquire(stop)) is False
    assert lease.epoch is None
    assert bucket.value("k") == b"other"
    assert await soon(Lease(bucket.as_kv(), "k", "h").acquire(stop)) is False
    assert len(bucket.calls) == 1  # a stopped candidate does not ask


async def test_a_candidate_that_loses_the_race_to_create_looks_again_shortly() -> None:
    bucket = FakeKV()
    times: list[float] = []

    def another_creates(kv: FakeKV) -> None:  # between this candidate's read and its create
        times.append(loop_time())
        kv.set("k", b"other")

    def and_goes_away(kv: FakeKV) -> None:
        times.append(loop_time())
        kv.entries.pop("k")

    bucket.script("create", another_creates)
    bucket.script("get", PASS, and_goes_away)
    lease = Lease(bucket.as_kv(), "k", "h", poll=30.0)
    with capture_logs() as logs:
        assert await soon(lease.acquire(asyncio.Event()))
    assert [log["event"] for log in logs] == ["lease race; looking again", "lease acquired"]
    assert logs[0]["key"] == "k"
    assert logs[0]["error"] == str(KeyWrongLastSequenceError())
    assert 0.2 <= times[1] - times[0] < 1.0
    assert lease.epoch == 2


async def test_a_bus_that_does_not_answer_is_asked_again_and_named_by_its_error_s_type(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(leasing, "REQUEST_TIMEOUT", 0.05)
    bucket = FakeKV()
    bucket.script("get", HANG, nats.errors.NoRespondersError())
    bucket.script("create", TimeoutError())
    lease = Lease(bucket.as_kv(), "k", "h")
    with capture_logs() as logs:
        assert await soon(lease.acquire(asyncio.Event()))
    assert [log.get("error") for log in events(logs, "lease race; looking again")] == [
        "TimeoutError",
        str(nats.errors.NoRespondersError()),
        "TimeoutError",
    ]
    assert lease.epoch == 1


# Confirming: a renewal on demand.


async def test_a_confirmation_renews_from_the_lease_s_revision_and_counts_from_its_request(
    clock: Clock,
) -> None:
    bucket = FakeKV()
    lease = Lease(bucket.as_kv(), "k", "h")
    assert await soon(lease.acquire(asyncio.Event()))
    clock.at(102.0)
    bucket.script("update", lambda _: clock.at(102.5))
    await soon(lease.confirm())
    assert bucket.calls[-1] == ("update", "k", b"h", 1)
    assert (lease.revision, lease.epoch, lease.renewed_at) == (2, 1, 102.0)


async def test_a_renewal_stored_without_its_answer_renews_again_from_the_stored_revision(
    clock: Clock,
) -> None:
    bucket = FakeKV()
    lease = Lease(bucket.as_kv(), "k", "h")
    assert await soon(lease.acquire(asyncio.Event()))
    stored = bucket.set("k", b"h")  # the earlier renewal, its answer lost
    clock.at(102.0)
    bucket.script("get", lambda _: clock.at(103.0))
    bucket.script("update", lambda _: clock.at(102.5), lambda _: clock.at(104.0))
    await soon(lease.confirm())
    assert bucket.calls[-1] == ("update", "k", b"h", stored)
    assert lease.revision == stored + 1
    assert lease.renewed_at == 103.0  # from the second request, not the first


@pytest.mark.parametrize("now", ["another", "deleted", "empty"])
async def test_a_lease_another_holds_or_nobody_holds_is_lost(now: str) -> None:
    bucket = FakeKV()
    lease = Lease(bucket.as_kv(), "k", "h")
    assert await soon(lease.acquire(asyncio.Event()))
    if now == "another":
        bucket.set("k", b"other")
    elif now == "deleted":
        await bucket.delete("k")
    else:
        bucket.set("k", None)
    with pytest.raises(LeaseLost, match=r"^the lease 'k' was taken over$") as lost:
        await soon(lease.confirm())
    assert isinstance(lost.value.__cause__, KeyWrongLastSequenceError)


async def test_a_lease_taken_between_the_read_back_and_the_renewal_is_lost() -> None:
    bucket = FakeKV()
    lease = Lease(bucket.as_kv(), "k", "h")
    assert await soon(lease.acquire(asyncio.Event()))
    bucket.set("k", b"h")
    bucket.script("update", lambda _: None, lambda kv: kv.set("k", b"other") and None)
    with pytest.raises(LeaseLost, match=r"^the lease 'k' was taken over$") as lost:
        await soon(lease.confirm())
    assert isinstance(lost.value.__cause__, KeyWrongLastSequenceError)


async def test_a_confirmation_the_bus_does_not_answer_confirms_nothing(clock: Clock) -> None:
    bucket = FakeKV()
    lease = Lease(bucket.as_kv(), "k", "h")
    assert await soon(lease.acquire(asyncio.Event()))
    clock.at(102.0)
    bucket.script("update", TimeoutError())
    with pytest.raises(TimeoutError):
        await soon(lease.confirm())
    assert (lease.revision, lease.renewed_at) == (1, 100.0)


# Keeping: renewals, and a failed one tried again.


async def test_a_failed_renewal_is_tried_again_after_the_poll_then_every_renewal_period() -> None:
    bucket = FakeKV()
    lease = Lease(bucket.as_kv(), "k", "h", renew_every=0.3, poll=0.01, ttl=60.0)
    assert await soon(lease.acquire(asyncio.Event()))
    stop = asyncio.Event()
    times: list[float] = []

    def failing(error: BaseException) -> Callable[[FakeKV], BaseException]:
        def fail(_: FakeKV) -> BaseException:
            times.append(loop_time())
            return error

        return fail

    def renewed(_: FakeKV) -> None:
        times.append(loop_time())

    def renewed_then_stopped(_: FakeKV) -> None:
        times.append(loop_time())
        stop.set()

    bucket.script(
        "update",
        failing(TimeoutError()),
        failing(nats.errors.NoRespondersError()),
        renewed,
        renewed_then_stopped,
    )
    started = loop_time()
    with capture_logs() as logs:
        await soon(lease.keep(stop))
    assert len(times) == 4
    assert times[0] - started >= 0.3
    assert times[1] - times[0] < 0.25  # the poll, not another renewal period
    assert times[2] - times[1] < 0.25
    assert times[3] - times[2] >= 0.3  # renewed: the renewal period again
    assert [(log["event"], log["key"], log["error"], log["log_level"]) for log in logs] == [
        ("lease not renewed; trying again", "k", "TimeoutError", "warning"),
        ("lease not renewed; trying again", "k", str(nats.errors.NoRespondersError()), "warning"),
    ]
    assert lease.revision == 3


async def test_a_holder_that_could_not_renew_for_the_hold_lets_go_and_says_for_how_long(clock: Clock) -> None:
    bucket = FakeKV()
    lease = Lease(bucket.as_kv(), "k", "h", renew_every=0.05, poll=0.01, ttl=1.0)
    assert await soon(lease.acquire(asyncio.Event()))
    assert lease.hold == pytest.approx(0.975)

    def unanswered_until(now: float) -> Callable[[FakeKV], BaseException]:
        def fail(_: FakeKV) -> BaseException:
            clock.at(now)
            return TimeoutError()

        return fail

    bucket.script("update", unanswered_until(100.5), unanswered_until(lease.renewed_at + lease.hold))
    with pytest.raises(LeaseLost) as lost:
        await soon(lease.keep(asyncio.Event()))
    assert str(lost.value) == "the lease 'k' was not renewed for 0.975 s: letting it go"
    assert isinstance(lost.value.__cause__, TimeoutError)
    assert len([call for call in bucket.calls if call[0] == "update"]) == 2


async def test_a_renewal_waits_no_longer_than_what_is_left_of_the_hold(clock: Clock) -> None:
    bucket = FakeKV()
    lease = Lease(bucket.as_kv(), "k", "h", renew_every=0.05, poll=0.01, ttl=10.0)
    assert await soon(lease.acquire(asyncio.Event()))
    clock.at(lease.renewed_at + lease.hold - 0.05)  # 0.05 s left
    bucket.script("update", HANG, lambda _: clock.at(200.0), HANG)
    started = loop_time()
    with pytest.raises(LeaseLost, match="not renewed"):
        await soon(lease.keep(asyncio.Event()))
    assert loop_time() - started < 0.9


async def test_a_takeover_seen_while_keeping_ends_the_keeping() -> None:
    bucket = FakeKV()
    lease = Lease(bucket.as_kv(), "k", "h", renew_every=0.01)
    assert await soon(lease.acquire(asyncio.Event()))
    bucket.set("k", b"other")
    with pytest.raises(LeaseLost, match="taken over"):
        await soon(lease.keep(asyncio.Event()))


async def test_keeping_a_lease_until_a_stop_renews_nothing_after_it() -> None:
    bucket = FakeKV()
    lease = Lease(bucket.as_kv(), "k", "h", renew_every=30.0)
    assert await soon(lease.acquire(asyncio.Event()))
    stop = asyncio.Event()
    keeping = asyncio.create_task(lease.keep(stop))
    await asyncio.sleep(0)
    stop.set()
    await soon(keeping)
    assert [call[0] for call in bucket.calls] == ["get", "create"]


async def test_a_released_lease_is_deleted_from_its_revision_and_a_bus_away_is_no_error() -> None:
    bucket = FakeKV()
    lease = Lease(bucket.as_kv(), "k", "h")
    assert await soon(lease.acquire(asyncio.Event()))
    bucket.script("delete", TimeoutError(), nats.errors.NoRespondersError())
    await soon(lease.release())
    await soon(lease.release())
    assert bucket.value("k") == b"h"
    await soon(lease.release())
    assert bucket.calls[-1] == ("delete", "k", None, 1)
    assert bucket.value("k") is None
    await soon(lease.release())  # gone already: a conflict, passed over


# lead and while_leading.


async def test_lead_keeps_the_lease_in_a_task_and_releases_it_after_the_stop() -> None:
    bucket = FakeKV()
    stop = asyncio.Event()
    lease = Lease(bucket.as_kv(), "k", "h", renew_every=30.0)
    keeping = await soon(lead(lease, stop))
    assert keeping is not None
    assert keeping.get_name() == "lease-k"
    assert bucket.value("k") == b"h"
    stop.set()
    await soon(keeping)
    assert bucket.value("k") is None
    assert await soon(lead(Lease(bucket.as_kv(), "k", "h"), stop)) is None


async def test_a_lost_lease_stops_the_leader_and_is_handed_to_on_lost() -> None:
    for told in (True, False):
        bucket = FakeKV()
        stop = asyncio.Event()
        seen: list[LeaseLost] = []
        lease = Lease(bucket.as_kv(), "k", "h", renew_every=0.01)
        with capture_logs() as logs:
            keeping = await soon(lead(lease, stop, seen.append if told else None))
            assert keeping is not None
            bucket.set("k", b"other")
            await soon(keeping)
        assert stop.is_set()
        assert bucket.value("k") == b"other"  # not released: it is another's
        assert events(logs, "lease lost; stopping") == [
            {
                "event": "lease lost; stopping",
                "key": "k",
                "error": "the lease 'k' was taken over",
                "log_level": "warning",
            }
        ]
        if told:
            assert [str(lost) for lost in seen] == ["the lease 'k' was taken over"]


async def test_while_leading_works_a_turn_per_tenure_and_stands_by_again_between() -> None:
    bucket = FakeKV()
    stop = asyncio.Event()
    turns: list[tuple[int | None, bytes | None, float, float]] = []

    async def work(turn: asyncio.Event, lease: Lease) -> None:
        turns.append((lease.epoch, bucket.value("k"), lease.renew_every, lease.poll))
        if len(turns) == 1:
            return  # the turn ends: the lease is released, and taken again
        if len(turns) == 2:
            bucket.set("k", b"other")  # taken over: the turn is told to end
            await soon(turn.wait())
            bucket.entries.pop("k")  # and the other goes away
            return
        stop.set()
        await soon(turn.wait())

    await soon(while_leading(bucket.as_kv(), "k", "h", work, stop, renew_every=0.01, poll=0.01))
    assert [epoch for epoch, *_ in turns] == [1, 3, 5]
    assert {(holder, renew, poll) for _, holder, renew, poll in turns} == {(b"h", 0.01, 0.01)}
    assert bucket.value("k") is None  # released at the stop


async def test_while_leading_told_to_stop_while_standing_by_returns() -> None:
    bucket = FakeKV()
    bucket.set("k", b"other")
    stop = asyncio.Event()
    worked: list[Lease] = []

    async def work(turn: asyncio.Event, lease: Lease) -> None:
        worked.append(lease)

    asked = asyncio.Event()
    bucket.script("get", lambda _: asked.set())
    running = asyncio.create_task(while_leading(bucket.as_kv(), "k", "h", work, stop, poll=30.0))
    await soon(asked.wait())
    stop.set()
    await soon(running)
    assert worked == []


async def test_a_turn_ends_when_the_stop_comes_while_working_and_leaves_no_task_running() -> None:
    bucket = FakeKV()
    stop = asyncio.Event()
    ended: list[bool] = []
    test = asyncio.current_task()

    async def work(turn: asyncio.Event, lease: Lease) -> None:
        stop.set()
        await soon(turn.wait())
        ended.append(lease.held())

    async def leading_then_left_running() -> list[asyncio.Task[Any]]:
        await while_leading(bucket.as_kv(), "k", "h", work, stop, renew_every=30.0)
        here = asyncio.current_task()
        return [task for task in asyncio.all_tasks() if task not in (here, test) and not task.done()]

    assert await soon(leading_then_left_running()) == []
    assert ended == [True]
    assert bucket.value("k") is None


async def test_a_failing_turn_passes_its_error_on_lets_the_lease_go_and_leaves_no_task_running() -> None:
    bucket = FakeKV()
    test = asyncio.current_task()

    async def work(turn: asyncio.Event, lease: Lease) -> None:
        raise RuntimeError("a bug in the work")

    async def leading_then_left_running() -> list[asyncio.Task[Any]]:
        with pytest.raises(RuntimeError, match="a bug in the work"):
            await while_leading(bucket.as_kv(), "k", "h", work, asyncio.Event(), renew_every=30.0)
        here = asyncio.current_task()
        return [task for task in asyncio.all_tasks() if task not in (here, test) and not task.done()]

    assert await soon(leading_then_left_running()) == []
    assert bucket.value("k") is None
