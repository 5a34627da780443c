"""The embedded platform end to end: submit-to-running latency and sustained submissions.

Starts the whole platform (`pai up`'s code: NATS from the wheel, every service a process) in a
temporary data dir, then measures:
  1. latency from POST /api/v2/jobs to the job's task.started on the stream, for one-task jobs
     submitted one after another (p50, p99), and how long the POST itself took, beside the bare
     time to spawn the task's own process (`python -m runtime --help`) measured in the same run.
     Each job is sent as soon as the previous one runs, so it shares the CPU with the previous
     task's start-up; the same is measured again with each job sent once the previous one has
     completed, which leaves the control plane alone on the machine;
  2. sustained submissions: C concurrent clients for S seconds, accepted jobs per second (with
     the CPU each process of the platform used per accepted job), and how many of them reached
     running. (With --engine, no jobs that queue: they queue behind a job holding the node's
     simulated GPU, which has no device to give a container.)
  3. with --engine (or --burst), a burst: B one-task jobs submitted at once (B concurrent POSTs),
     how long until all completed (jobs/s), and the CPU per job.

Command: .venv/bin/python bench/platform_bench.py [N] [C] [S] [--engine auto|podman|docker] [--burst B]
With --engine the tasks run in a local busybox+bash image (never pulled): ``auto`` as the platform
runs them here (runc itself beside Podman, PAI_CONTAINER_RUNNER=auto), ``podman`` and ``docker``
through the engine's run (PAI_CONTAINER_RUNNER=engine). B is 100 with --engine unless given;
without --engine only --burst B measures a burst (of host tasks).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import nats
import psutil
from nats.aio.msg import Msg

from libs.protocol.events import JobCompleted, TaskStarted, decode_event
from pai.embedded.platform import EmbeddedPlatform, free_port
from runtime.processes import runtime_command
from services.orchestrator.adapters.forking import FORK_SERVER_MODULE
from services.orchestrator.adapters.isolation import task_environment
from services.orchestrator.adapters.local import runtime_path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' image builder

from tests.support.images import build_marker_image, remove_image

# Their jobs name images such as python:3.11 that no machine here holds: tasks run on the host
# unless the run asks for an engine (PAI_TASK_ENGINE).
os.environ.setdefault("PAI_TASK_ENGINE", "host")

JOB = """protocolVersion: 2
name: {name}
type: job
prerequisites:
  - {{name: image, type: dockerimage, uri: python:3.11-slim}}
taskRoles:
  main:
    dockerImage: image
    resourcePerInstance: {{cpu: 1, memoryMB: 64, gpu: 0}}
    commands:
      - "true"
"""
# Asks for the node's one (simulated) GPU, which a holder job keeps for the whole run: the job is
# accepted and queued, never spawned, so the run measures the control plane (REST, bus,
# scheduler, read model) without task start-up. (A GPU the machine does not have at all is now
# refused at submission, naming the largest node.)
QUEUED_JOB = JOB.replace("gpu: 0", "gpu: 1")
HOLDER_JOB = QUEUED_JOB.replace('"true"', '"sleep 3600"')


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bare_spawn_ms(n: int = 20) -> list[float]:
    """`python -m runtime --help` started as the local executor starts a task's runtime."""
    argv = [*runtime_command(Path("spec.json"))[:-2], "--help"]
    env = task_environment(os.environ, PYTHONPATH=runtime_path())
    out = []
    for _ in range(n):
        started = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=False, env=env)
        out.append((time.perf_counter() - started) * 1000)
    return out


UNTHROTTLED = {
    f"PAI_RATE_LIMIT_{name}": "10000000"
    for name in ("API_PER_MIN", "LIST_JOB_PER_MIN", "SUBMIT_JOB_PER_HOUR")
}


def platform_processes(platform: EmbeddedPlatform) -> dict[str, psutil.Process]:
    """Every process of the platform by name (each service, nats), and this benchmark's own."""
    assert platform.supervisor is not None
    processes = {name: psutil.Process(pid) for name, pid in platform.supervisor.pids().items()}
    processes["client"] = psutil.Process()
    return processes


def cpu_seconds(processes: dict[str, psutil.Process]) -> dict[str, float]:
    """User plus system CPU time each process has used so far; "tasks" is what the tasks' runtimes
    and their commands used: the orchestrator's ended children (runtimes it spawned), and its
    runtime fork server with the children that server has reaped (runtimes it forked)."""
    used = {name: sum(process.cpu_times()[:2]) for name, process in processes.items()}
    if "orchestrator" in processes:
        orchestrator = processes["orchestrator"]
        times = orchestrator.cpu_times()
        used["tasks"] = times.children_user + times.children_system
        for child in orchestrator.children():
            with contextlib.suppress(psutil.Error):
                if FORK_SERVER_MODULE in child.cmdline():
                    used["tasks"] += sum(child.cpu_times()[:4])
    return used


def cpu_line(used: dict[str, float], jobs: int) -> str:
    shares = ", ".join(f"{name} {cpu * 1000 / max(1, jobs):.2f}" for name, cpu in used.items())
    return f"CPU per accepted job, ms: {shares}; total {sum(used.values()) * 1000 / max(1, jobs):.2f}"


async def submit_for(
    api: aiohttp.ClientSession, clients: int, seconds: float, template: str, prefix: str
) -> tuple[list[str], float]:
    """Submit from `clients` concurrent loops for `seconds`; the accepted job ids and the time taken."""
    accepted: list[str] = []
    deadline = time.perf_counter() + seconds

    async def client(c: int) -> None:
        k = 0
        while time.perf_counter() < deadline:
            async with api.post("/api/v2/jobs", data=template.format(name=f"{prefix}-{c}-{k}")) as response:
                if response.status == 202:
                    accepted.append((await response.json())["jobId"])
            k += 1

    started = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    return accepted, time.perf_counter() - started


BENCH_IMAGE = "localhost/pai-bench-platform:1"


async def submit_burst(
    api: aiohttp.ClientSession,
    burst: int,
    until: Callable[[Callable[[], bool]], Awaitable[None]],
    completed: set[str],
    platform: EmbeddedPlatform,
) -> tuple[list[str], float, int, float, dict[str, float]]:
    """``burst`` one-task jobs POSTed at once: their ids, how long until all were accepted, how
    many completed, how long from the first POST until the last completed, the CPU per process."""
    processes = platform_processes(platform)
    cpu_before = cpu_seconds(processes)
    sent = time.perf_counter()

    async def post(i: int) -> str | None:
        async with api.post("/api/v2/jobs", data=JOB.format(name=f"burst-{i}")) as response:
            return str((await response.json())["jobId"]) if response.status == 202 else None

    ids = [job_id for job_id in await asyncio.gather(*(post(i) for i in range(burst))) if job_id]
    accepted_s = time.perf_counter() - sent
    with contextlib.suppress(TimeoutError):
        await until(lambda: all(job_id in completed for job_id in ids))
    elapsed = time.perf_counter() - sent
    used = {name: cpu - cpu_before[name] for name, cpu in cpu_seconds(processes).items()}
    return ids, accepted_s, sum(1 for job_id in ids if job_id in completed), elapsed, used


async def main(
    n: int, clients: int, seconds: float, engine: str | None = None, burst: int | None = None
) -> None:
    global JOB, QUEUED_JOB, HOLDER_JOB
    engine_env: dict[str, str] = {}
    if engine is not None:
        build_marker_image(BENCH_IMAGE, "bench")
        JOB, QUEUED_JOB, HOLDER_JOB = (
            t.replace("python:3.11-slim", BENCH_IMAGE) for t in (JOB, QUEUED_JOB, HOLDER_JOB)
        )
        engine_env = {
            "PAI_TASK_ENGINE": engine,
            "PAI_IMAGE_PULL": "never",
            "PAI_CONTAINER_RUNNER": "auto" if engine == "auto" else "engine",
        }
    try:
        await _main(
            n, clients, seconds, engine_env, (100 if engine is not None else 0) if burst is None else burst
        )
    finally:
        if engine is not None:
            remove_image(BENCH_IMAGE)


async def _main(n: int, clients: int, seconds: float, engine_env: dict[str, str], burst: int = 0) -> None:
    # How long without a start or an end the load's wait gives up: containers start slower, and
    # a burst of them keeps the machine busy for longer between two events.
    quiet_gap = 30 if engine_env else 5
    with tempfile.TemporaryDirectory() as tmp:
        # A large node so that CPU never limits how many one-task jobs run at once.
        platform = EmbeddedPlatform(
            Path(tmp),
            api_port=free_port(),
            admin_password="bench-pass",
            # One busy client: rate limits far above what it sends (still counted, never hit).
            extra_env={"PAI_CPU_OVERCOMMIT": "1000", "PAI_SIMULATED_GPUS": "1", **UNTHROTTLED, **engine_env},
        )
        info = await platform.start()
        try:
            nc = await nats.connect(info.nats_url, **info.nats_options())
            started_at: dict[str, float] = {}
            completed: set[str] = set()
            got = asyncio.Event()

            async def on_event(msg: Msg) -> None:
                event = decode_event(msg.data)
                if isinstance(event, TaskStarted) and event.job_id not in started_at:
                    started_at[event.job_id] = time.perf_counter()
                    got.set()
                elif isinstance(event, JobCompleted):
                    completed.add(event.job_id)
                    got.set()

            for subject in ("pai.job.*.task.started", "pai.job.*.job.completed"):
                await nc.jetstream().subscribe(subject, ordered_consumer=True, cb=on_event)
            # aiohttp's client: about 0.1 ms of CPU per request here, where httpx took 1.6 ms that the
            # platform under test, on the same two cores, would then lack.
            async with (
                aiohttp.ClientSession(info.api_url, timeout=aiohttp.ClientTimeout(total=60)) as login_session,
                login_session.post(
                    "/api/v2/authn/basic/login", json={"username": "admin", "password": "bench-pass"}
                ) as login,
            ):
                token = (await login.json())["token"]
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "text/yaml"}
            async with aiohttp.ClientSession(
                info.api_url, headers=headers, timeout=aiohttp.ClientTimeout(total=60)
            ) as api:

                async def until(condition: Callable[[], bool]) -> None:
                    while not condition():
                        await asyncio.wait_for(got.wait(), 60)
                        got.clear()

                async def one_job(name: str) -> tuple[str, float, float]:
                    """The job's id, its POST's duration and its submit-to-running time (ms)."""
                    got.clear()
                    sent = time.perf_counter()
                    async with api.post("/api/v2/jobs", data=JOB.format(name=name)) as response:
                        job_id: str = (await response.json())["jobId"]
                    answered = time.perf_counter()
                    await until(lambda: job_id in started_at)
                    return job_id, (answered - sent) * 1000, (started_at[job_id] - sent) * 1000

                back_to_back = [await one_job(f"lat-{i}") for i in range(n)]
                # The last tasks are still starting: "alone" begins once they have all ended.
                await until(lambda: all(job_id in completed for job_id, _, _ in back_to_back))
                alone = []
                for i in range(n):
                    job_id, post_ms, running_ms = await one_job(f"alone-{i}")
                    await until(lambda: job_id in completed)  # noqa: B023 - awaited before the next turn
                    alone.append((job_id, post_ms, running_ms))
                spawn = bare_spawn_ms()
                burst_result = await submit_burst(api, burst, until, completed, platform) if burst else None

                processes = platform_processes(platform)
                queued: list[str] = []
                queued_seconds, cpu_used = 0.0, {}
                if not engine_env:
                    # The simulated GPU has no device a container could be given: not with --engine.
                    async with api.post("/api/v2/jobs", data=HOLDER_JOB.format(name="holder")) as response:
                        assert response.status == 202, await response.text()
                        holder = (await response.json())["jobId"]
                    await until(lambda: holder in started_at)
                    cpu_before = cpu_seconds(processes)
                    queued, queued_seconds = await submit_for(api, clients, seconds, QUEUED_JOB, "queued")
                    cpu_used = {name: cpu - cpu_before[name] for name, cpu in cpu_seconds(processes).items()}
                load_started = time.perf_counter()
                cpu_before = cpu_seconds(processes)
                accepted, load_seconds = await submit_for(api, clients, seconds, JOB, "load")
                running_by = time.perf_counter() + 300
                while time.perf_counter() < running_by and not all(j in started_at for j in accepted):
                    got.clear()
                    try:
                        await asyncio.wait_for(got.wait(), quiet_gap)
                    except TimeoutError:
                        break
                drained = time.perf_counter() - load_started
                # Every accepted job ran and ended (its task reaped): the CPU it cost, tasks included.
                completed_by = time.perf_counter() + 300
                while time.perf_counter() < completed_by and not all(j in completed for j in accepted):
                    got.clear()
                    try:
                        await asyncio.wait_for(got.wait(), quiet_gap)
                    except TimeoutError:
                        break
                ran = sum(1 for j in accepted if j in completed)
                finished = time.perf_counter() - load_started
                run_cpu = {name: cpu - cpu_before[name] for name, cpu in cpu_seconds(processes).items()}
            await nc.close()
        finally:
            with contextlib.suppress(Exception):  # the holder's task ends with the run
                async with aiohttp.ClientSession(
                    info.api_url, headers={"Authorization": f"Bearer {token}"}
                ) as stopper:
                    await stopper.put("/api/v2/jobs/admin~holder/executionType", json={"value": "STOP"})
            await platform.stop()

    for title, runs in (
        ("each sent when the previous one runs", back_to_back),
        ("each sent when the previous one completed", alone),
    ):
        latencies, posts = [r[2] for r in runs], [r[1] for r in runs]
        print(f"submit-to-running, {n} one-task jobs, {title}:")
        print(
            f"  p50 {statistics.median(latencies):.0f} ms, p99 {percentile(latencies, 0.99):.0f} ms, "
            f"max {max(latencies):.0f} ms; the POST alone p50 {statistics.median(posts):.0f} ms, "
            f"p99 {percentile(posts, 0.99):.0f} ms"
        )
    print(f"  bare spawn of the task process: p50 {statistics.median(spawn):.0f} ms, max {max(spawn):.0f} ms")
    reached = sum(1 for j in accepted if j in started_at)
    print(f"sustained submissions, {clients} clients for {seconds:g} s each:")
    if queued_seconds:
        print(f"  jobs that queue (no task starts): {len(queued) / queued_seconds:.0f} jobs/s accepted")
        cpu_used.pop("tasks", None)
        print(f"    {cpu_line(cpu_used, len(queued))}")
    else:
        print("  jobs that queue: not measured in images (the simulated GPU is no device for a container)")
    print(f"  jobs that run (one task process each): {len(accepted) / load_seconds:.0f} jobs/s accepted")
    print(
        f"  {reached} of them reached running within {drained:.1f} s of the load's start: "
        f"{reached / drained:.1f} jobs/s that run"
    )
    print(
        f"  {ran} of them completed within {finished:.1f} s of the load's start: {ran / finished:.1f} jobs/s"
    )
    print(f"  {cpu_line(run_cpu, ran)}")
    if burst_result is not None:
        ids, accepted_s, done, elapsed, burst_cpu = burst_result
        where = "in their image" if engine_env else "on the host"
        print(f"{burst} one-task jobs {where} submitted at once:")
        print(
            f"  {len(ids)} accepted in {accepted_s:.1f} s; {done} completed within {elapsed:.1f} s of the "
            f"first POST: {done / elapsed:.1f} jobs/s"
        )
        print(f"  {cpu_line(burst_cpu, done)}")


if __name__ == "__main__":
    argv = sys.argv[1:]
    engine = None
    burst = None
    if "--engine" in argv:
        at = argv.index("--engine")
        engine = argv[at + 1]
        del argv[at : at + 2]
    if "--burst" in argv:
        at = argv.index("--burst")
        burst = int(argv[at + 1])
        del argv[at : at + 2]
    args = [int(a) for a in argv]
    asyncio.run(
        main(
            args[0] if args else 50,
            args[1] if len(args) > 1 else 16,
            args[2] if len(args) > 2 else 10,
            engine,
            burst,
        )
    )
