"""The scheduler's fence record in KV (libs/backbone/fencing.py) over an in-memory bucket: what a
new leader writes and in which order, its retry after another leader's write, and when it is
told that it was deposed."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from nats.js.errors import APIError
from structlog.testing import capture_logs

from libs.backbone import fencing
from libs.backbone.fencing import FENCES_BUCKET, SCHEDULER_FENCE, Deposed, FenceReader, raise_fence
from libs.protocol.fencing import Fence, decode, encode
from libs.protocol.subjects import JOBS_STREAM
from tests.support.fake_kv import FakeKV, soon


class Jobs:
    """The JetStream context as raise_fence uses it: the job stream's last sequence."""

    def __init__(self, last_seq: int, bucket: FakeKV | None = None) -> None:
        self.last_seq = last_seq
        self.bucket = bucket
        self.asked: list[str] = []

    async def stream_info(self, name: str) -> Any:
        self.asked.append(name)
        return SimpleNamespace(state=SimpleNamespace(last_seq=self.last_seq))

    async def key_value(self, bucket: str) -> Any:
        self.asked.append(bucket)
        return self.bucket


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The pauses slept (asyncio.sleep, for this test), each made at once."""
    slept: list[float] = []
    real = asyncio.sleep

    async def sleep(delay: float, result: Any = None) -> Any:
        slept.append(delay)
        return await real(0, result)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    return slept


async def test_a_new_leader_writes_its_fence_pending_then_with_the_job_stream_s_last_sequence() -> None:
    bucket = FakeKV()
    jobs = Jobs(last_seq=41)
    with capture_logs() as logs:
        fence = await soon(raise_fence(jobs, bucket.as_kv(), 7))  # type: ignore[arg-type]
    assert fence == Fence(7, 41)
    writes = [
        (method, key, decode(value), last) for method, key, value, last in bucket.calls if method != "get"
    ]
    assert writes == [
        ("create", SCHEDULER_FENCE, (Fence(7, None),), None),
        ("update", SCHEDULER_FENCE, (Fence(7, 41),), 1),
    ]
    assert jobs.asked == [JOBS_STREAM]
    assert [log for log in logs if log["event"] == "fence raised"] == [
        {"event": "fence raised", "epoch": 7, "cut": 41, "log_level": "info"}
    ]


async def test_a_fence_is_raised_under_the_key_it_is_given_and_finishes_an_older_pending_one() -> None:
    bucket = FakeKV()
    bucket.set("other", encode([Fence(3, 10), Fence(5, None)]))
    fence = await soon(raise_fence(Jobs(last_seq=20), bucket.as_kv(), 6, key="other"))  # type: ignore[arg-type]
    assert fence == Fence(6, 20)
    assert decode(bucket.value("other")) == (Fence(3, 10), Fence(5, 20), Fence(6, 20))
    assert "scheduler" not in bucket.entries


async def test_a_write_that_another_leader_overtook_is_read_again_and_made_over_its_record(
    pauses: list[float],
) -> None:
    bucket = FakeKV()
    first = bucket.set(SCHEDULER_FENCE, encode([Fence(3, 10)]))
    # Another leader's write lands between this one's read and its write.
    bucket.script("update", lambda kv: kv.set(SCHEDULER_FENCE, encode([Fence(3, 10), Fence(4, None)])))
    updated = await soon(
        fencing._rewrite(bucket.as_kv(), SCHEDULER_FENCE, 5, lambda fences: (*fences, Fence(5, None)))
    )
    assert updated == (Fence(3, 10), Fence(4, None), Fence(5, None))
    assert decode(bucket.value(SCHEDULER_FENCE)) == updated
    updates = [last for method, _, _, last in bucket.calls if method == "update"]
    assert updates == [first, first + 1]  # the second from the record read again
    assert pauses == [0.05]


async def test_a_conflicting_first_write_is_tried_again_as_a_create() -> None:
    bucket = FakeKV()
    bucket.script("create", APIError(), APIError())
    updated = await soon(
        fencing._rewrite(bucket.as_kv(), SCHEDULER_FENCE, 2, lambda fences: (Fence(2, None),))
    )
    assert updated == (Fence(2, None),)
    assert [method for method, *_ in bucket.calls] == ["get", "create"] * 3
    assert decode(bucket.value(SCHEDULER_FENCE)) == (Fence(2, None),)


async def test_a_leader_whose_epoch_a_newer_fence_passed_is_deposed_and_told_by_whom() -> None:
    bucket = FakeKV()
    bucket.set(SCHEDULER_FENCE, encode([Fence(9, 30), Fence(8, 20), Fence(4, 5)]))
    with pytest.raises(Deposed) as raised:
        await soon(raise_fence(Jobs(last_seq=50), bucket.as_kv(), 6))  # type: ignore[arg-type]
    assert str(raised.value) == "a newer scheduler leader (epoch 9) took over"
    assert [method for method, *_ in bucket.calls] == ["get"]  # nothing written


async def test_a_leader_rewriting_its_own_fence_is_not_deposed_by_it() -> None:
    bucket = FakeKV()
    bucket.set(SCHEDULER_FENCE, encode([Fence(6, None)]))
    fence = await soon(raise_fence(Jobs(last_seq=12), bucket.as_kv(), 6))  # type: ignore[arg-type]
    assert fence == Fence(6, 12)
    assert decode(bucket.value(SCHEDULER_FENCE)) == (Fence(6, 12),)


async def test_the_reader_reads_the_record_each_time_and_counts_a_decision_without_epoch() -> None:
    bucket = FakeKV()
    reader = await FenceReader.open(Jobs(0, bucket))  # type: ignore[arg-type]
    assert reader.key == SCHEDULER_FENCE
    assert await soon(reader.fences()) == ()
    assert await soon(reader.deposed(3, 100)) is False
    bucket.set(SCHEDULER_FENCE, encode([Fence(5, 40)]))
    assert await soon(reader.fences()) == (Fence(5, 40),)
    assert await soon(reader.deposed(3, 41)) is True
    assert await soon(reader.deposed(3, 40)) is False
    assert await soon(reader.deposed(None, 41)) is False
    bucket.set(SCHEDULER_FENCE, encode([Fence(5, 40), Fence(7, None)]))
    assert await soon(reader.deposed(6, 50)) is None


async def test_the_reader_opens_the_fences_bucket() -> None:
    bucket = FakeKV()
    jobs = Jobs(0, bucket)
    reader = await soon(FenceReader.open(jobs))  # type: ignore[arg-type]
    assert jobs.asked == [FENCES_BUCKET]
    assert reader.kv is bucket.as_kv()
    other = FenceReader(FakeKV().as_kv(), "other")
    assert other.key == "other"
