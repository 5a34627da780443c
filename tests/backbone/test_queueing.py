"""KeyedWorkQueue runs one key's work in order and different keys' work at the same time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from libs.backbone.queueing import KeyedWorkQueue


async def test_work_under_one_key_runs_in_submission_order_one_at_a_time() -> None:
    queue = KeyedWorkQueue()
    log: list[str] = []
    running = 0
    gates = [asyncio.Event() for _ in range(3)]

    def make(i: int) -> Callable[[], Awaitable[None]]:
        async def work() -> None:
            nonlocal running
            running += 1
            assert running == 1
            log.append(f"start {i}")
            await gates[i].wait()
            log.append(f"end {i}")
            running -= 1

        return work

    for i in range(3):
        queue.submit("job-1", make(i))
    # Open the gates in reverse: order must still follow submission.
    for gate in reversed(gates):
        gate.set()
    await queue.join()
    assert log == ["start 0", "end 0", "start 1", "end 1", "start 2", "end 2"]
    assert queue.pending == 0
    assert queue.active_keys == 0


async def test_different_keys_run_concurrently() -> None:
    queue = KeyedWorkQueue()
    a_started, b_finished = asyncio.Event(), asyncio.Event()

    async def a() -> None:
        a_started.set()
        # Finishes only once b has run: proves b did not wait behind a.
        await b_finished.wait()

    async def b() -> None:
        await a_started.wait()
        b_finished.set()

    queue.submit("job-a", a)
    queue.submit("job-b", b)
    await asyncio.wait_for(queue.join(), 10)
    assert b_finished.is_set()


async def test_a_failing_item_is_isolated_and_its_key_goes_on() -> None:
    queue = KeyedWorkQueue()
    done: list[str] = []

    async def boom() -> None:
        raise RuntimeError("handler bug")

    async def fine() -> None:
        done.append("after")

    queue.submit("k", boom)
    queue.submit("k", fine)
    await queue.join()
    assert done == ["after"]


async def test_room_shrinks_with_pending_work_and_waiters_wake_when_it_frees() -> None:
    queue = KeyedWorkQueue(limit=2)
    release = asyncio.Event()

    async def hold() -> None:
        await release.wait()

    queue.submit("a", hold)
    queue.submit("b", hold)
    assert queue.room == 0
    waiter = asyncio.create_task(queue.wait_for_room(1))
    await asyncio.sleep(0)
    assert not waiter.done()
    release.set()
    await asyncio.wait_for(waiter, 10)
    await queue.join()
    assert queue.room == 2


async def test_closing_with_cancel_stops_waiting_work_and_refuses_more() -> None:
    queue = KeyedWorkQueue()
    never = asyncio.Event()
    started = asyncio.Event()

    async def stuck() -> None:
        started.set()
        await never.wait()

    queue.submit("k", stuck)
    queue.submit("k", stuck)
    await started.wait()
    await asyncio.wait_for(queue.close(cancel=True), 10)
    assert queue.pending == 0
    with pytest.raises(RuntimeError, match="closed"):
        queue.submit("k", stuck)


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="limit"):
        KeyedWorkQueue(limit=0)


async def test_a_pipelined_key_starts_its_work_in_order_without_waiting_for_each_end() -> None:
    queue = KeyedWorkQueue(pipeline=4)
    sink: list[int] = []  # an ordered sink: each item takes its place before it first waits
    finished: list[int] = []
    release = asyncio.Event()

    def make(i: int) -> Callable[[], Awaitable[None]]:
        async def work() -> None:
            sink.append(i)
            await release.wait()
            finished.append(i)

        return work

    for i in range(6):
        queue.submit("job-1", make(i))
    queue.submit("job-2", make(100))
    while len(sink) < 5:  # four of job-1 at once (not one), and job-2 beside them
        await asyncio.sleep(0)
    release.set()  # (before asserting, so nothing is left waiting if an assertion fails)
    assert [i for i in sink if i < 100] == [0, 1, 2, 3]
    assert 100 in sink
    await asyncio.wait_for(queue.join(), 10)
    assert [i for i in sink if i < 100] == [0, 1, 2, 3, 4, 5]
    assert sorted(finished) == [0, 1, 2, 3, 4, 5, 100]
    assert queue.pending == 0
    assert queue.active_keys == 0


async def test_a_failing_item_of_a_pipelined_key_fails_alone() -> None:
    queue = KeyedWorkQueue(pipeline=3)
    done: list[int] = []

    def make(i: int) -> Callable[[], Awaitable[None]]:
        async def work() -> None:
            if i == 1:
                raise RuntimeError("bad item")
            done.append(i)

        return work

    for i in range(5):
        queue.submit("k", make(i))
    await asyncio.wait_for(queue.join(), 10)
    assert done == [0, 2, 3, 4]


def test_a_pipeline_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="pipeline"):
        KeyedWorkQueue(pipeline=0)
