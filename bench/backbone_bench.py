"""Benchmark: event throughput through the backbone on the embedded nats-server.

Bursts of hundreds of submissions a second must pass publish -> JetStream -> consume with
acks; this measures what one process achieves on this machine: publishing with dedup ids and
trace headers, consuming with per-job ordering, and how long a killed bus takes to come back.
Run: .venv/bin/python bench/backbone_bench.py
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from nats.aio.msg import Msg
from pydantic import BaseModel

from libs.backbone import (
    BackboneSettings,
    ConsumerSpec,
    EmbeddedNats,
    StreamSpec,
    by_job_id,
    configure_logging,
    connect,
    consume,
    ensure_consumer,
    ensure_stream,
    publish,
)

EVENTS = 5000
JOBS = 200
CONCURRENT = 100


class Event(BaseModel):
    job_id: str
    n: int


def subject(i: int) -> str:
    return f"pai.job.j{i % JOBS}.tick"


async def run(store: Path) -> None:
    async with EmbeddedNats(store) as server:
        bus = await connect(server.url, initial_timeout=10)
        await ensure_stream(bus.js, StreamSpec(name="JOBS", subjects=("pai.job.>",)))
        await ensure_consumer(bus.js, ConsumerSpec(stream="JOBS", durable="bench", max_ack_pending=5000))

        started = time.perf_counter()
        for i in range(EVENTS // 5):
            await publish(
                bus.js, f"pai.job.j{i % JOBS}.tick", Event(job_id=f"j{i % JOBS}", n=i), msg_id=f"s{i}"
            )
        sequential = (EVENTS // 5) / (time.perf_counter() - started)

        started = time.perf_counter()
        for base in range(0, EVENTS, CONCURRENT):
            await asyncio.gather(
                *(
                    publish(
                        bus.js, f"pai.job.j{i % JOBS}.tick", Event(job_id=f"j{i % JOBS}", n=i), msg_id=f"c{i}"
                    )
                    for i in range(base, base + CONCURRENT)
                )
            )
        concurrent = EVENTS / (time.perf_counter() - started)

        total = EVENTS // 5 + EVENTS
        handled = 0
        done = asyncio.Event()
        stop = asyncio.Event()

        async def handler(msg: Msg) -> None:
            nonlocal handled
            Event.model_validate_json(msg.data)
            handled += 1
            if handled == total:
                done.set()

        started = time.perf_counter()
        task = asyncio.create_task(
            consume(bus.js, "JOBS", "bench", handler, stop=stop, key=by_job_id, batch=200, max_in_flight=1000)
        )
        await done.wait()
        consumed = total / (time.perf_counter() - started)
        stop.set()
        await task

        server.kill_sync()
        started = time.perf_counter()
        await server.restart()
        while True:  # the first JetStream answer after the crash
            try:
                await asyncio.wait_for(bus.js.stream_info("JOBS"), 0.2)
                break
            except TimeoutError:
                continue
        recovered = time.perf_counter() - started
        await bus.close()

    print(f"publish, one at a time: {sequential:,.0f} events/s ({EVENTS // 5} events)")
    print(f"publish, {CONCURRENT} in flight: {concurrent:,.0f} events/s ({EVENTS} events)")
    print(f"consume keyed by {JOBS} jobs, ack each: {consumed:,.0f} events/s ({total} events)")
    print(f"kill -9, restart, client reconnected: {recovered:.2f} s")


def main() -> None:
    configure_logging(BackboneSettings(log_level="warning", log_format="console"))
    with tempfile.TemporaryDirectory() as store:
        asyncio.run(run(Path(store)))


if __name__ == "__main__":
    main()
