"""Reading a whole KV bucket (or a pattern of it) on a three-server NATS cluster, as the production
topology runs: every value, every time.

nats-py's watcher may say "the current values are all in" before the values arrive when the
consumer's messages and its info take different routes between servers; a read that trusted it
came back short about once in 25 (the alerter then forgot what it had notified, and notified
every job again after a takeover).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import nats
import pytest
from nats.js.api import KeyValueConfig
from pydantic import BaseModel

from libs.backbone.kv import ModelStore, current_entries, settled
from libs.backbone.natsserver import EmbeddedNats

CLUSTER = "cluster {{\n  name: kv\n  listen: 127.0.0.1:{listen}\n  routes: [{routes}]\n}}\n"
KEYS = 50
READS = 60  # per server and kind of read: 540 reads in all


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[list[str]]:
    route_ports = [free_port() for _ in range(3)]
    routes = ", ".join(f"nats-route://127.0.0.1:{port}" for port in route_ports)
    servers = [
        EmbeddedNats(
            tmp_path / f"nats-{i}",
            port=free_port(),
            name=f"kv-{i}",
            authorization=CLUSTER.format(listen=route_ports[i], routes=routes),
        )
        for i in range(3)
    ]
    try:
        await asyncio.gather(*(server.start() for server in servers))
        yield [server.url for server in servers]
    finally:
        await asyncio.gather(*(server.stop() for server in servers), return_exceptions=True)


class Item(BaseModel):
    n: int


async def test_every_read_of_a_replicated_bucket_from_every_server_has_every_value(
    cluster: list[str],
) -> None:
    first = await nats.connect(cluster[0])
    clients = [first, *[await nats.connect(url) for url in cluster[1:]]]
    try:
        js = first.jetstream(timeout=10)
        for _ in range(100):  # the cluster elects its JetStream leader after the servers greet
            try:
                kv = await js.create_key_value(KeyValueConfig(bucket="ITEMS", replicas=3))
                break
            except (nats.errors.Error, TimeoutError):
                await asyncio.sleep(0.2)
        else:
            pytest.fail("the cluster never took a replicated bucket")
        for n in range(KEYS):
            await kv.put(f"item.{n}", Item(n=n).model_dump_json().encode())
        await kv.delete("item.0")  # a tombstone is not a value
        await kv.put("other.x", b'{"n": -1}')
        expected = {f"item.{n}" for n in range(1, KEYS)}
        short: list[tuple[str, int]] = []
        for client in clients:
            bucket = await client.jetstream(timeout=10).key_value("ITEMS")
            store = await ModelStore.open(client.jetstream(timeout=10), "ITEMS", Item)
            for _ in range(READS):
                whole = await current_entries(bucket)
                if set(whole) != expected | {"other.x"}:
                    short.append(("whole", len(whole)))
                part = await current_entries(bucket, "item.>")
                if set(part) != expected:
                    short.append(("pattern", len(part)))
                keys = await store.keys()
                if set(keys) != expected | {"other.x"}:
                    short.append(("keys", len(keys)))
        assert short == [], f"{len(short)} of {3 * 3 * READS} reads came back short"
        # An empty match is an empty read, not a wait.
        assert await asyncio.wait_for(current_entries(kv, "none.>"), 10) == {}
    finally:
        for client in clients:
            with contextlib.suppress(Exception):
                await client.close()


class Watcher:
    """A watcher as nats-py hands it out: queued entries, and its consumer's info on request."""

    def __init__(self, items: list[Any], delivered: int, pending: int = 0) -> None:
        self.items = list(items)
        self.info = SimpleNamespace(num_pending=pending, delivered=SimpleNamespace(consumer_seq=delivered))
        self._sub = self

    async def consumer_info(self) -> Any:
        return self.info

    def __aiter__(self) -> Watcher:
        return self

    async def __anext__(self) -> Any:
        if not self.items:
            raise StopAsyncIteration
        return self.items.pop(0)


def entry(key: str, delta: int) -> Any:
    return SimpleNamespace(key=key, delta=delta)


async def marks(watcher: Watcher) -> list[str | None]:
    return [None if e is None else e.key for e in [e async for e in settled(watcher)]]


async def test_a_marker_before_values_the_consumer_sent_is_held_until_the_last_of_them() -> None:
    early = Watcher([None, entry("a", 2), entry("b", 1), entry("c", 0), entry("d", 0)], delivered=3)
    assert await marks(early) == ["a", "b", "c", None, "d"]


async def test_a_marker_with_nothing_sent_means_no_values() -> None:
    assert await marks(Watcher([None, entry("later", 0)], delivered=0)) == [None, "later"]


async def test_a_marker_after_the_values_is_given_once() -> None:
    assert await marks(Watcher([entry("a", 1), entry("b", 0), None], delivered=2)) == ["a", "b", None]
