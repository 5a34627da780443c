"""Orchestrator timings: the pure deciders on large jobs, the handler with its KV state on large
jobs (no processes spawned), and a real job through the service.

Run: .venv/bin/python bench/orchestrator_bench.py
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from libs.backbone.connecting import connect
from libs.backbone.natsserver import EmbeddedNats
from libs.backbone.topology import ensure_topology
from services.orchestrator.adapters.state import FrameworkStore
from services.orchestrator.app import OrchestratorSettings, main
from services.orchestrator.core.deciders import decide
from services.orchestrator.core.effects import Context, TaskLaunched
from services.orchestrator.handlers import Orchestrator
from tests.orchestrator.jobs import job_config
from tests.orchestrator.service_support import submit, watch_jobs
from tests.orchestrator.sim import T0, completed, config, scheduled, submitted


def core_lifecycle(tasks: int) -> tuple[float, int]:
    """Seconds for one job of `tasks` tasks from submission to completion, and decisions made."""
    cfg = config({"worker": {"instances": tasks}})
    ctx = Context(now=T0)
    start = time.perf_counter()
    fw = decide(None, submitted(cfg), ctx).framework
    fw = decide(fw, scheduled(cfg), ctx).framework
    for i in range(tasks):
        fw = decide(fw, TaskLaunched("job1", (0, "worker", i, 0), 1000 + i, "/t"), ctx).framework
    for i in range(tasks):
        fw = decide(fw, completed((0, "worker", i, 0), 0), ctx).framework
    assert fw is not None
    assert fw.outcome is not None
    return time.perf_counter() - start, 2 + 2 * tasks


async def service_round_trips(runs: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedNats(Path(tmp) / "nats")
        await server.start()
        settings = OrchestratorSettings(nats_url=server.url, data_dir=Path(tmp) / "data", log_level="warning")
        stop, ready = asyncio.Event(), asyncio.Event()
        service = asyncio.create_task(main(settings, stop, ready=ready))
        await ready.wait()
        bus = await connect(server.url)
        events = await watch_jobs(bus)
        times = []
        for run in range(runs):
            began = time.perf_counter()
            await submit(bus, f"bench{run}", job_config({"worker": (1, "echo hi")}))
            await events.wait_for("job.completed", f"bench{run}")
            times.append(time.perf_counter() - began)
        stop.set()
        await service
        await bus.close()
        await server.stop()
        return times


class InstantExecutor:
    """Spawns nothing: the handler's own cost (decisions, KV writes, publishes) is what is timed."""

    def __init__(self) -> None:
        self.spawned = 0

    async def start(self, framework: Any, key: Any) -> tuple[int, Path]:
        self.spawned += 1
        return 100_000 + self.spawned, Path("/nonexistent")

    def adopt(self, *args: Any) -> None:
        return None

    def probe(self, *args: Any) -> Any:
        raise NotImplementedError

    async def stop(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def report(self, *args: Any) -> None:
        return None

    def release(self, *args: Any) -> None:
        return None

    async def close(self) -> None:
        return None


class WriteCounter:
    """Counts the messages and bytes written to the framework bucket, and the largest one."""

    def __init__(self, store: FrameworkStore) -> None:
        self.bytes = 0
        self.writes = 0
        self.largest = 0
        js = store._kv._js
        publish = js.publish
        prefix = f"$KV.{store._store.bucket}."

        async def counted(subject: str, payload: bytes = b"", *args: Any, **kwargs: Any) -> Any:
            if subject.startswith(prefix):
                self.bytes += len(payload)
                self.writes += 1
                self.largest = max(self.largest, len(payload))
            return await publish(subject, payload, *args, **kwargs)

        js.publish = counted  # type: ignore[method-assign]


async def handler_lifecycle(tasks: int) -> tuple[float, float, WriteCounter, WriteCounter]:
    """A `tasks`-task job through the handler with a real KV bucket: seconds to record every launch
    (from job.scheduled), seconds for every task.completed, and what each phase wrote."""
    with tempfile.TemporaryDirectory() as tmp:
        async with EmbeddedNats(Path(tmp) / "nats") as server:
            bus = await connect(server.url)
            await ensure_topology(bus.js)
            store = await FrameworkStore.open(bus.js)
            publish_to_bus = store._kv._js.publish

            async def publish(_event: Any) -> None:
                return None

            orchestrator = Orchestrator(store, InstantExecutor(), publish)  # type: ignore[arg-type]
            cfg = config({"worker": {"instances": tasks}})
            await orchestrator.apply("job1", submitted(cfg))
            launching = WriteCounter(store)
            began = time.perf_counter()
            await orchestrator.apply("job1", scheduled(cfg))
            launched = time.perf_counter()
            store._kv._js.publish = publish_to_bus  # type: ignore[method-assign]
            completing = WriteCounter(store)
            for i in range(tasks):
                await orchestrator.apply("job1", completed((0, "worker", i, 0), 0))
            ended = time.perf_counter()
            final = await FrameworkStore.open(bus.js)
            stored = await final.get("job1")
            assert stored is not None, "the job's state is gone"
            assert stored.value.outcome is not None, "the job did not finish"
            await bus.close()
    return launched - began, ended - launched, launching, completing


def report(sizes: tuple[int, ...] = (100, 1000, 10_000)) -> None:
    for tasks in (10, 100, 1000):
        seconds, decisions = core_lifecycle(tasks)
        rate = decisions / seconds
        print(f"core: {tasks:5d}-task job lifecycle: {seconds * 1000:8.1f} ms, {rate:8.0f} decisions/s")
    for tasks in sizes:
        launch, completions, launching, completing = asyncio.run(handler_lifecycle(tasks))
        print(
            f"handler with KV: {tasks:5d}-task job: every launch recorded in {launch * 1000:7.0f} ms "
            f"({launching.bytes / 1e6:.1f} MB in {launching.writes} values, largest "
            f"{launching.largest / 1e3:.0f} kB); every completion in {completions * 1000:7.0f} ms "
            f"({completing.bytes / max(1, tasks) / 1e3:.1f} kB a completion, largest value "
            f"{completing.largest / 1e3:.1f} kB)"
        )
    times = asyncio.run(service_round_trips(10))
    print(
        f"service: 1-task job, job.submitted -> job.completed (runtime process included), 10 runs: "
        f"median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms"
    )


if __name__ == "__main__":
    report()
