"""Orchestrator timings: the pure deciders on large jobs, the handler with its KV state on large
jobs (no processes spawned), a real job through the service, and a large job through rest, the
scheduler and the orchestrator on a real nats-server with an executor that spawns nothing.

Run: .venv/bin/python bench/orchestrator_bench.py [platform TASKS | handler TASKS...]
(`platform TASKS` runs only the last part, with a job of TASKS tasks; `handler TASKS...` only
the handler with its KV state, one job of each size.)
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import nats
import psutil
from pydantic import SecretStr

from libs.backbone.connecting import connect
from libs.backbone.logging import configure_logging
from libs.backbone.natsserver import EmbeddedNats
from libs.backbone.provisioning import ensure_consumer
from libs.backbone.running import new_event_loop
from libs.backbone.topology import ensure_topology, publish_event
from libs.backbone.tracing import configure_tracing
from libs.protocol.events import JobCompleted, decode_event
from pai.embedded.platform import EmbeddedPlatform, free_port
from services.orchestrator.adapters.executing import TaskExit
from services.orchestrator.adapters.state import FrameworkStore, SubmissionReader
from services.orchestrator.app import CONSUMER, OrchestratorSettings, consume_jobs, main
from services.orchestrator.core.deciders import decide
from services.orchestrator.core.effects import Context, TaskLaunched
from services.orchestrator.core.frameworks import TaskKey
from services.orchestrator.handlers import Orchestrator
from tests.orchestrator.executors import InstantExecutor
from tests.orchestrator.jobs import job_config
from tests.orchestrator.service_support import submit, watch_jobs
from tests.orchestrator.sim import T0, completed, config, scheduled, submitted

T = TypeVar("T")


def core_lifecycle(tasks: int) -> tuple[float, int]:
    """Seconds for one job of `tasks` tasks from submission to completion, and decisions made."""
    cfg = config({"worker": {"instances": tasks}})
    ctx = Context(now=T0)
    start = time.perf_counter()
    fw = decide(None, submitted(cfg), ctx).framework
    fw = decide(fw, scheduled(cfg), ctx).framework
    for i in range(tasks):
        fw = decide(fw, TaskLaunched("job1", TaskKey(0, "worker", i, 0), 1000 + i, "/t"), ctx).framework
    for i in range(tasks):
        fw = decide(fw, completed(TaskKey(0, "worker", i, 0), 0), ctx).framework
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


class WriteCounter:
    """Counts the messages and bytes written to the framework bucket, and the largest one."""

    def __init__(self, store: FrameworkStore) -> None:
        self.bytes = 0
        self.writes = 0
        self.largest = 0
        self.cpu = 0.0
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


async def handler_lifecycle(
    tasks: int, together: bool = True
) -> tuple[float, float, WriteCounter, WriteCounter]:
    """A `tasks`-task job through the handler with a real KV bucket: seconds to record every launch
    (from job.scheduled), seconds for every task.completed, and what each phase wrote.

    `together`: the completions are handed in as the consume loop hands a job's queued messages
    over (in stream order, each before the previous is done), so the handler decides them in
    groups; otherwise one after the other, each awaited."""
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
            cpu = time.process_time()
            exits = [completed(TaskKey(0, "worker", i, 0), 0) for i in range(tasks)]
            if together:
                await asyncio.gather(*(orchestrator.apply("job1", e) for e in exits))
            else:
                for e in exits:
                    await orchestrator.apply("job1", e)
            ended = time.perf_counter()
            completing.cpu = time.process_time() - cpu
            final = await FrameworkStore.open(bus.js)
            stored = await final.get("job1")
            assert stored is not None, "the job's state is gone"
            assert stored.value.outcome is not None, "the job did not finish"
            await bus.close()
    return launched - began, ended - launched, launching, completing


class EndingExecutor(InstantExecutor):
    """Spawns nothing, and every task 'exits' with 0 as soon as its start is recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.on_exit: Any = None
        self._pending: set[asyncio.Task[None]] = set()

    async def start(self, framework: Any, key: Any) -> tuple[int, Path]:
        started = await super().start(framework, key)
        job_id = framework.job_id
        task = asyncio.create_task(self.on_exit(TaskExit(job_id, key, 0, None, "")))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return started


LARGE_JOB = """protocolVersion: 2
name: {name}
type: job
prerequisites:
  - {{name: image, type: dockerimage, uri: python:3.11-slim}}
taskRoles:
  worker:
    instances: {tasks}
    dockerImage: image
    resourcePerInstance: {{cpu: 0, memoryMB: 64, gpu: 0}}
    commands:
      - "true"
"""


async def platform_job(tasks: int) -> dict[str, Any]:
    """One job of `tasks` tasks through rest, the scheduler (and the monitor's node report), each
    its own process as `pai up` runs them, and an orchestrator in this process whose executor
    spawns nothing. Seconds from POST to job.completed, to rest's detail showing SUCCEEDED, the
    detail's time, and the largest message the job stream and the framework bucket carried."""
    with tempfile.TemporaryDirectory() as tmp:
        platform = EmbeddedPlatform(
            Path(tmp),
            api_port=free_port(),
            admin_password="bench-pass",
            services=("rest", "scheduler", "monitor"),
            extra_env={
                "PAI_MEMORY_OVERCOMMIT": "64",
                "PAI_RATE_LIMIT_API_PER_MIN": "10000000",
                "PAI_LOG_LEVEL": "warning",
            },
        )
        info = await platform.start()
        stop = asyncio.Event()
        try:
            settings = OrchestratorSettings(
                nats_url=info.nats_url,
                nats_user=info.nats_user,
                nats_password=SecretStr(info.nats_password),
                nats_ca=info.nats_ca,
                data_dir=Path(tmp) / "orchestrator",
                log_level="warning",
            )
            # As the service does (run_service): a line per handled message costs, and with no
            # tracer provider installed every message would look one up in the environment.
            configure_logging(settings)
            configure_tracing(settings)
            bus = await connect(settings, name="bench-orchestrator")
            await ensure_consumer(bus.js, CONSUMER)
            executor = EndingExecutor()
            orchestrator = Orchestrator(
                await FrameworkStore.open(bus.js),
                executor,  # type: ignore[arg-type]
                lambda e: publish_event(bus.js, e),  # type: ignore[arg-type,return-value]
                submissions=SubmissionReader(bus.js),
            )
            executor.on_exit = orchestrator.on_task_exit
            consuming = asyncio.create_task(consume_jobs(bus.js, orchestrator, stop))  # as the service does
            watcher = await nats.connect(info.nats_url, **info.nats_options())
            largest = {"job stream": 0, "framework bucket": 0}
            done = asyncio.Event()
            began = time.perf_counter()
            timeline: dict[str, list[float]] = {}  # event type -> [first, last, count] after the POST

            async def on_job(msg: Any) -> None:
                largest["job stream"] = max(largest["job stream"], len(msg.data))
                kind = msg.subject.split(".", 3)[3]  # pai.job.<job id>.<kind>: no decoding here
                seen = timeline.setdefault(kind, [time.perf_counter() - began, 0.0, 0])
                seen[1], seen[2] = time.perf_counter() - began, seen[2] + 1
                if kind == "job.completed" and isinstance(decode_event(msg.data), JobCompleted):
                    done.set()

            async def on_state(msg: Any) -> None:
                largest["framework bucket"] = max(largest["framework bucket"], len(msg.data))

            # Plain subscriptions see every message as it is published, at a fraction of what
            # JetStream consumers would cost this process (which is also the orchestrator's).
            await watcher.subscribe("pai.job.>", cb=on_job, pending_msgs_limit=-1, pending_bytes_limit=-1)
            await watcher.subscribe(
                "$KV.PAI_FRAMEWORKS.>", cb=on_state, pending_msgs_limit=-1, pending_bytes_limit=-1
            )
            async with httpx.AsyncClient(base_url=info.api_url, timeout=60) as api:
                login = await api.post(
                    "/api/v2/authn/basic/login", json={"username": "admin", "password": "bench-pass"}
                )
                api.headers["Authorization"] = f"Bearer {login.json()['token']}"
                began = time.perf_counter()
                response = await api.post(
                    "/api/v2/jobs",
                    content=LARGE_JOB.format(name="large", tasks=tasks),
                    headers={"Content-Type": "text/yaml"},
                )
                assert response.status_code == 202, response.text
                await asyncio.wait_for(done.wait(), 600)
                completed_after = time.perf_counter() - began
                while True:  # polled: rest's read model has no completion signal to await
                    detail = await api.get("/api/v2/jobs/admin~large")
                    if detail.json().get("jobStatus", {}).get("state") == "SUCCEEDED":
                        break
                    await asyncio.sleep(0.05)
                shown_after = time.perf_counter() - began
                times = []
                for _ in range(5):
                    asked = time.perf_counter()
                    detail = await api.get("/api/v2/jobs/admin~large")
                    times.append(time.perf_counter() - asked)
                roles = detail.json()["taskRoles"]
                assert len(roles["worker"]["taskStatuses"]) == tasks
                cpu = {"this process (orchestrator, watcher)": sum(psutil.Process().cpu_times()[:2])}
                for child in psutil.Process().children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        argv = child.cmdline()
                        name = (
                            argv[2].removeprefix("services.") if argv[1:2] == ["-m"] else Path(argv[0]).name
                        )
                        cpu[name] = sum(child.cpu_times()[:2])
            await watcher.close()
            stop.set()
            await consuming
            await bus.close()
            return {
                "completed": completed_after,
                "shown": shown_after,
                "detail": statistics.median(times),
                "detail bytes": len(detail.content),
                "timeline": timeline,
                "cpu": cpu,
                **{f"largest {name}": float(size) for name, size in largest.items()},
            }
        finally:
            stop.set()
            await platform.stop()


def run(main: Coroutine[Any, Any, T]) -> T:
    """On the services' own event loop (uvloop), as the orchestrator runs in `pai up`."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(main)


def report_platform(tasks: int) -> None:
    result = run(platform_job(tasks))
    for kind, (first, last, count) in result.pop("timeline").items():
        print(f"  {kind}: {count} between {first:.2f} s and {last:.2f} s after the POST")
    print(
        "  CPU seconds, start-up included: " + ", ".join(f"{k} {v:.1f}" for k, v in result.pop("cpu").items())
    )
    print(
        f"platform: {tasks}-task job, POST -> job.completed {result['completed']:.1f} s, "
        f"-> rest's detail SUCCEEDED {result['shown']:.1f} s; detail (median of 5) "
        f"{result['detail'] * 1000:.0f} ms, {result['detail bytes'] / 1e6:.1f} MB; largest message: "
        f"job stream {result['largest job stream'] / 1e3:.0f} kB, "
        f"framework bucket {result['largest framework bucket'] / 1e3:.0f} kB"
    )


def report(sizes: tuple[int, ...] = (100, 1000, 10_000)) -> None:
    for tasks in (10, 100, 1000):
        seconds, decisions = core_lifecycle(tasks)
        rate = decisions / seconds
        print(f"core: {tasks:5d}-task job lifecycle: {seconds * 1000:8.1f} ms, {rate:8.0f} decisions/s")
    report_handler(sizes)
    times = asyncio.run(service_round_trips(10))
    print(
        f"service: 1-task job, job.submitted -> job.completed (runtime process included), 10 runs: "
        f"median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms"
    )


def report_handler(sizes: tuple[int, ...]) -> None:
    for tasks, together in [(n, t) for n in sizes for t in (False, True)]:
        launch, completions, launching, completing = run(handler_lifecycle(tasks, together))
        how = "as the consume loop hands them over" if together else "one at a time"
        print(
            f"handler with KV ({how}): {tasks:5d}-task job: every launch recorded in {launch * 1000:7.0f} ms "
            f"({launching.bytes / 1e6:.1f} MB in {launching.writes} values, largest "
            f"{launching.largest / 1e3:.0f} kB); every completion in {completions * 1000:7.0f} ms "
            f"(this process's CPU {completing.cpu * 1000:.0f} ms) "
            f"({completing.bytes / max(1, tasks) / 1e3:.1f} kB a completion, largest value "
            f"{completing.largest / 1e3:.1f} kB)"
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["platform"]:
        report_platform(int(sys.argv[2]) if len(sys.argv) > 2 else 10_000)
    elif sys.argv[1:2] == ["handler"]:
        report_handler(tuple(int(n) for n in sys.argv[2:]) or (1000,))
    else:
        report()
        report_platform(10_000)
