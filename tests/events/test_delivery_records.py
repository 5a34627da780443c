"""The deliveries a webhook's owner reads: every attempt, while it is being written and after."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats.errors
import pytest

from libs.backbone.connecting import Bus
from libs.backbone.kv import ModelStore
from libs.backbone.natsserver import EmbeddedNats
from libs.backbone.provisioning import ensure_kv
from services.events.adapters.delivering import DELIVERIES, Deliveries
from services.events.core.webhooks import Attempt, Attempts
from tests.events.support import settings


def attempt(number: int, status: int = 401) -> Attempt:
    return Attempt(
        delivery="d1",
        type="job.submitted",
        stream="jobs",
        sequence=1,
        attempt=number,
        status=status,
        at=datetime(2026, 11, 28, 8, 0, number, tzinfo=UTC),
    )


@pytest.fixture
async def deliveries(topology: Bus, nats_server: EmbeddedNats, tmp_path: Path) -> Deliveries:
    """The gateway's delivery records alone: no lanes, no receivers."""
    config = settings(nats_server.url, "http://127.0.0.1:9", tmp_path)
    records = Deliveries(topology.js, None, None, config, None)  # type: ignore[arg-type]
    await ensure_kv(topology.js, DELIVERIES)
    records.attempts = await ModelStore.open(topology.js, DELIVERIES.bucket, Attempts)
    return records


async def written(deliveries: Deliveries) -> list[int]:
    """The attempt numbers KV holds for webhook h1."""
    assert deliveries.attempts is not None
    found = await deliveries.attempts.get("h1")
    return [a.attempt for a in found.value.items] if found is not None else []


async def test_attempts_being_written_are_shown_then_shown_once(
    deliveries: Deliveries, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = deliveries.attempts
    assert store is not None
    writing, release = asyncio.Event(), asyncio.Event()
    create = store.create

    async def slow_create(key: str, value: Any) -> Any:
        writing.set()
        await release.wait()
        return await create(key, value)

    monkeypatch.setattr(store, "create", slow_create)
    for number in (1, 2, 3):
        await deliveries._record("h1", attempt(number))
    flushing = asyncio.create_task(deliveries.flush())
    await writing.wait()
    # Out of the unwritten ones, not in KV yet: the owner still sees every attempt.
    assert [a.attempt for a in await deliveries.recent("h1")] == [1, 2, 3]
    release.set()
    await flushing
    assert [a.attempt for a in await deliveries.recent("h1")] == [1, 2, 3]
    assert await written(deliveries) == [1, 2, 3]


async def test_attempts_the_bus_failed_to_write_are_kept_for_the_next_write(
    deliveries: Deliveries, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = deliveries.attempts
    assert store is not None
    create = store.create
    failures = [nats.errors.TimeoutError()]

    async def failing_once(key: str, value: Any) -> Any:
        if failures:
            raise failures.pop()
        return await create(key, value)

    monkeypatch.setattr(store, "create", failing_once)
    await deliveries._record("h1", attempt(1))
    with pytest.raises(nats.errors.TimeoutError):
        await deliveries.flush()
    await deliveries._record("h1", attempt(2))
    assert [a.attempt for a in await deliveries.recent("h1")] == [1, 2]
    assert await written(deliveries) == []
    await deliveries.flush()
    assert await written(deliveries) == [1, 2]
