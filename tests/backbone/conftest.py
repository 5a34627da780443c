"""Backbone tests leave no task behind: every loop, ticker and watcher they start is stopped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest


@pytest.fixture(autouse=True)
async def no_leaked_tasks() -> AsyncIterator[None]:
    yield
    # Let cancelled tasks run their last step before looking.
    for _ in range(3):
        await asyncio.sleep(0)
    current = asyncio.current_task()
    leaked = [task for task in asyncio.all_tasks() if task is not current and not task.done()]
    assert not leaked, f"tasks left running: {[task.get_coro() for task in leaked]}"
