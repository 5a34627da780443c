"""Waiting for a condition in tests without guessing how long it takes.

Some facts are only observable by asking (a consumer's ack floor, a stream's message count):
``eventually`` re-checks until the condition holds and fails with the last observation when
a generous deadline passes, so a slow machine makes a test slower, never red.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T]],
    condition: Callable[[T], bool],
    *,
    within: float = 20.0,
    every: float = 0.02,
) -> T:
    """Call ``probe`` until ``condition(result)`` holds; return that result."""
    deadline = time.monotonic() + within
    while True:
        result = await probe()
        if condition(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within:g}s; last observed: {result!r}")
        await asyncio.sleep(every)


def polled(probe: Callable[[], T]) -> Callable[[], Awaitable[T]]:
    """A plain function as an `eventually` probe, for state that is read without awaiting."""

    async def wrapped() -> T:
        return probe()

    return wrapped
