"""Streams, consumers and KV buckets are provisioned idempotently and updated to match a spec."""

from __future__ import annotations

import asyncio

import pytest
from nats.js import api

from libs.backbone.connecting import Bus, connect
from libs.backbone.errors import ProvisioningError
from libs.backbone.natsserver import EmbeddedNats
from libs.backbone.provisioning import (
    ConsumerSpec,
    KVSpec,
    StreamSpec,
    ensure_consumer,
    ensure_kv,
    ensure_stream,
)

JOBS = StreamSpec(name="JOBS", subjects=("pai.job.>",), duplicate_window=60.0)


async def test_ensuring_a_stream_twice_changes_nothing(bus: Bus) -> None:
    first = await ensure_stream(bus.js, JOBS)
    second = await ensure_stream(bus.js, JOBS)
    assert second.config == first.config
    assert second.created == first.created
    assert first.config.storage == api.StorageType.FILE
    assert first.config.duplicate_window == 60.0


async def test_two_processes_ensuring_the_same_things_at_once_both_succeed(
    nats_server: EmbeddedNats, bus: Bus
) -> None:
    other = await connect(nats_server.url, name="other", initial_timeout=5)
    try:
        consumer = ConsumerSpec(stream="JOBS", durable="scheduler", filter_subjects=("pai.job.*.submitted",))
        kv = KVSpec(bucket="jobs_state", history=3)
        for js in (bus.js, other.js):
            await asyncio.gather(ensure_stream(js, JOBS), ensure_stream(other.js, JOBS))
        await asyncio.gather(ensure_consumer(bus.js, consumer), ensure_consumer(other.js, consumer))
        await asyncio.gather(ensure_kv(bus.js, kv), ensure_kv(other.js, kv))
    finally:
        await other.close()
    names = await bus.js.streams_info()
    assert sorted(str(s.config.name) for s in names) == ["JOBS", "KV_jobs_state"]


async def test_a_changed_stream_spec_updates_the_stream(bus: Bus) -> None:
    await ensure_stream(bus.js, JOBS)
    info = await ensure_stream(
        bus.js, StreamSpec(name="JOBS", subjects=("pai.job.>", "pai.node.>"), max_age=3600)
    )
    assert info.config.subjects == ["pai.job.>", "pai.node.>"]
    assert info.config.max_age == 3600


async def test_a_change_that_jetstream_refuses_is_reported_with_the_stream_name(bus: Bus) -> None:
    await ensure_stream(bus.js, JOBS)
    # Retention cannot change from limits to work-queue on an existing stream.
    refused = StreamSpec(name="JOBS", subjects=("pai.job.>",), retention=api.RetentionPolicy.WORK_QUEUE)
    with pytest.raises(ProvisioningError, match="JOBS"):
        await ensure_stream(bus.js, refused)


async def test_ensuring_a_consumer_twice_keeps_one_durable_and_applies_changes(bus: Bus) -> None:
    await ensure_stream(bus.js, JOBS)
    spec = ConsumerSpec(stream="JOBS", durable="orchestrator", ack_wait=10, max_ack_pending=1)
    first = await ensure_consumer(bus.js, spec)
    again = await ensure_consumer(bus.js, spec)
    assert again.config.ack_wait == first.config.ack_wait == 10
    assert again.config.max_ack_pending == 1
    changed = await ensure_consumer(bus.js, ConsumerSpec(stream="JOBS", durable="orchestrator", ack_wait=20))
    assert changed.config.ack_wait == 20
    consumers = await bus.js.consumers_info("JOBS")
    assert [c.name for c in consumers] == ["orchestrator"]


async def test_ensuring_a_kv_bucket_twice_is_a_no_op_and_a_new_history_is_applied(bus: Bus) -> None:
    kv = await ensure_kv(bus.js, KVSpec(bucket="leases"))
    await kv.put("scheduler", b"a")
    await ensure_kv(bus.js, KVSpec(bucket="leases"))
    assert (await kv.get("scheduler")).value == b"a"

    await ensure_kv(bus.js, KVSpec(bucket="leases", history=5))
    info = await bus.js.stream_info("KV_leases")
    assert info.config.max_msgs_per_subject == 5
