"""GroupCommit: items handed in together are written together; failures reach their callers."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from libs.backbone.grouping import GroupCommit


class Dying(BaseException):
    """Stands for the process going down in the middle of a write."""


async def test_items_handed_in_together_are_written_in_one_group_in_order() -> None:
    groups: list[list[int]] = []

    async def many(items: Sequence[int]) -> list[int]:
        groups.append(list(items))
        return [i * 10 for i in items]

    async def one(item: int) -> int:
        groups.append([item])
        return item * 10

    commit = GroupCommit(many, one, max_batch=4)
    results = await asyncio.gather(*(commit.submit(i) for i in range(6)))
    assert results == [0, 10, 20, 30, 40, 50]
    assert groups == [[0, 1, 2, 3], [4, 5]]
    assert commit.idle


async def test_a_group_that_fails_is_written_one_by_one_and_the_bad_item_fails_alone() -> None:
    async def many(items: Sequence[int]) -> list[int]:
        if 2 in items:
            raise ValueError("a bad item in the group")
        return list(items)

    async def one(item: int) -> int:
        if item == 2:
            raise ValueError("bad item")
        return item

    commit = GroupCommit(many, one)
    outcomes = await asyncio.gather(*(commit.submit(i) for i in range(4)), return_exceptions=True)
    assert outcomes[:2] == [0, 1]
    assert isinstance(outcomes[2], ValueError)
    assert outcomes[3] == 3


async def test_a_writer_that_dies_takes_every_waiting_caller_with_it_instead_of_leaving_it_waiting() -> None:
    async def many(items: Sequence[int]) -> list[int]:
        raise Dying

    async def one(item: int) -> int:
        raise AssertionError("never written one by one")

    commit = GroupCommit(many, one, max_batch=2)
    calls = [asyncio.ensure_future(commit.submit(i)) for i in range(3)]
    done, _ = await asyncio.wait(calls, timeout=10)
    assert len(done) == 3
    for call in calls:
        with pytest.raises(Dying):
            call.result()
    await asyncio.gather(commit._writer or asyncio.sleep(0), return_exceptions=True)
    assert commit.idle
