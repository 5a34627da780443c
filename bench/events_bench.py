"""The events gateway under load: many SSE subscribers, publish-to-receipt delay, webhooks.

Run: .venv/bin/python bench/events_bench.py [--subscribers 1000] [--jobs-per-second 100]
     [--seconds 10] [--webhook-events 2000] [--failing-receivers 20] [--failing-events 500]
     [--phases fanout,webhooks,failing]

One gateway process (``python -m services.events``) on its own nats-server; a stand-in for
REST's /users/me in this process. Phases:
1. idle: the gateway's resident memory before and after N subscribers connect (per subscriber);
2. live: job lifecycles (5 events a job) published straight to PAI_JOBS at the given job rate
   while the N subscribers read; delay from publish (before the call) to receipt of each
   event by each subscriber, p50 and p99 over every (event, subscriber) pair;
3. webhooks: subscribers gone, one webhook to a local receiver answering 200; M events
   published; deliveries per second and the gateway's CPU time per delivery;
4. failing: N failing webhooks (a third refusing connections, a third answering 500, the rest
   never answering) beside one healthy webhook, all following the same job and task types; M
   events published at --failing-rate events/s; the healthy receiver's delay from publish
   (before the call) to receipt, p50 and p99 (each subscription is its own delivery queue, so
   the failing ones should not hold it).
This process is both publisher and every subscriber, on the same machine: the figures
include its own scheduling delays.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import psutil
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from libs.backbone.connecting import Bus, connect  # noqa: E402
from libs.backbone.natsserver import EmbeddedNats  # noqa: E402
from libs.backbone.topology import ensure_topology, publish_event  # noqa: E402
from libs.protocol.events import (  # noqa: E402
    EventBase,
    JobCompleted,
    JobScheduled,
    JobState,
    JobSubmitted,
    TaskCompleted,
    TaskPlacement,
    TaskStarted,
)
from pai.embedded.platform import free_port  # noqa: E402
from tests.support.jobs import job_model  # noqa: E402

TYPES = "job.submitted,job.scheduled,task.started,task.completed,job.completed"


SMALL = {"cpu": 1, "memoryMB": 64, "gpu": 0}  # each task's resources, unless a case sets its own


def lifecycle(job_id: str) -> list[EventBase]:
    place = TaskPlacement(role="main", index=0, node="n1", node_address="10.0.0.1")
    return [
        JobSubmitted(
            job_id=job_id,
            user="admin",
            name=job_id,
            virtual_cluster="default",
            config=job_model({"name": job_id, "taskRoles": {"main": {"resourcePerInstance": SMALL}}}),
        ),
        JobScheduled(job_id=job_id, attempt=0, placements=(place,)),
        TaskStarted(job_id=job_id, attempt=0, role="main", index=0, node="n1"),
        TaskCompleted(job_id=job_id, attempt=0, role="main", index=0, exit_code=0),
        JobCompleted(job_id=job_id, attempt=0, state=JobState.SUCCEEDED, exit_code=0),
    ]


async def identity_stub() -> tuple[web.AppRunner, str]:
    async def me(_request: web.Request) -> web.Response:
        return web.json_response({"username": "admin", "admin": True})

    app = web.Application()
    app.router.add_get("/api/v2/users/me", me)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


async def subscriber(
    session: aiohttp.ClientSession, url: str, ready: asyncio.Event, received: list[tuple[int, float]]
) -> None:
    async with session.get(
        f"{url}/api/v2/events", params={"types": TYPES}, headers={"Authorization": "Bearer b"}
    ) as response:
        assert response.status == 200, await response.text()
        ready.set()
        async for line in response.content:
            if line.startswith(b"id: "):
                received.append((int(line[4:]), time.time()))


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000)[int(q * 1000) - 1] if len(values) > 1 else values[0]


async def main(args: argparse.Namespace) -> None:
    data = Path(tempfile.mkdtemp(prefix="events-bench-"))
    server = EmbeddedNats(data / "nats")
    await server.start()
    stub, rest_url = await identity_stub()
    bus = await connect(server.url, name="bench", initial_timeout=10)
    await ensure_topology(bus.js)
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PAI_NATS_URL": server.url,
        "PAI_REST_URL": rest_url,
        "PAI_EVENTS_PORT": str(port),
        "PAI_LOG_FORMAT": "json",
        "PAI_LOG_LEVEL": "warning",
        "PAI_IDENTITY_CACHE_SECONDS": "60",
    }
    gateway = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.events", env=env, stderr=asyncio.subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    process = psutil.Process(gateway.pid)
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=None)
    )
    try:
        for _ in range(600):
            try:
                async with session.get(f"{url}/api/v2/events") as response:
                    if response.status == 401:
                        break
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        phases = set(args.phases.split(","))
        if "fanout" in phases:
            await fanout(args, session, url, bus, process)
        if "webhooks" in phases:
            await webhooks(args, session, url, bus, process)
        if "failing" in phases:
            await failing(args, session, url, bus)
    finally:
        await session.close()
        gateway.terminate()
        await gateway.wait()
        await bus.close()
        await stub.cleanup()
        await server.stop()


async def fanout(
    args: argparse.Namespace, session: aiohttp.ClientSession, url: str, bus: Bus, process: psutil.Process
) -> None:
    rss_before = process.memory_info().rss

    # 1. idle subscribers
    readies = [asyncio.Event() for _ in range(args.subscribers)]
    inboxes: list[list[tuple[int, float]]] = [[] for _ in range(args.subscribers)]
    started = time.monotonic()
    readers = [
        asyncio.create_task(subscriber(session, url, readies[i], inboxes[i])) for i in range(args.subscribers)
    ]
    await asyncio.gather(*(ready.wait() for ready in readies))
    connect_s = time.monotonic() - started
    await asyncio.sleep(2.0)
    rss_after = process.memory_info().rss
    per_sub = (rss_after - rss_before) / args.subscribers
    print(
        f"{args.subscribers} subscribers connected in {connect_s:.1f} s; gateway RSS "
        f"{rss_before / 2**20:.0f} MiB -> {rss_after / 2**20:.0f} MiB, "
        f"{per_sub / 1024:.1f} KiB per idle subscriber"
    )

    # 2. live load
    published: dict[int, float] = {}
    cpu_before = sum(process.cpu_times()[:2])
    own_before = sum(psutil.Process().cpu_times()[:2])
    jobs = int(args.jobs_per_second * args.seconds)
    begin = time.monotonic()

    async def publish_job(n: int) -> None:
        sent = time.time()
        # Sent in order on one connection; the acks are awaited together.
        acks = await asyncio.gather(*(publish_event(bus.js, e) for e in lifecycle(f"bench{n}")))
        for ack in acks:
            published[ack.seq] = sent

    publishing = []
    for n in range(jobs):
        due = begin + n / args.jobs_per_second
        pause = due - time.monotonic()
        if pause > 0:
            await asyncio.sleep(pause)
        publishing.append(asyncio.create_task(publish_job(n)))
    achieved = jobs / (time.monotonic() - begin)
    await asyncio.gather(*publishing)
    last_seq = max(published)
    deadline = time.monotonic() + 120
    # Polling counters the readers fill: a bench loop, there is no event to await.
    while time.monotonic() < deadline and any(not box or box[-1][0] < last_seq for box in inboxes):  # noqa: ASYNC110
        await asyncio.sleep(0.2)
    cpu_live = sum(process.cpu_times()[:2]) - cpu_before
    cpu_own = sum(psutil.Process().cpu_times()[:2]) - own_before
    wall = time.monotonic() - begin
    delays = [(t - published[seq]) * 1000 for box in inboxes for seq, t in box if seq in published]
    expected = len(published) * args.subscribers
    print(
        f"live: {jobs} jobs ({len(published)} events) at {achieved:.0f} jobs/s "
        f"to {args.subscribers} subscribers; received {len(delays)}/{expected}; "
        f"publish-to-receipt p50 {percentile(delays, 0.5):.0f} ms, "
        f"p99 {percentile(delays, 0.99):.0f} ms, max {max(delays):.0f} ms; "
        f"in {wall:.1f} s the gateway used "
        f"{cpu_live:.1f} s CPU, this client {cpu_own:.1f} s; load average {os.getloadavg()[0]:.1f}"
    )
    for reader in readers:
        reader.cancel()
    await asyncio.gather(*readers, return_exceptions=True)


async def webhooks(
    args: argparse.Namespace, session: aiohttp.ClientSession, url: str, bus: Bus, process: psutil.Process
) -> None:
    # 3. webhooks
    got = 0
    done = asyncio.Event()

    async def receive(request: web.Request) -> web.Response:
        nonlocal got
        await request.read()
        got += 1
        if got >= args.webhook_events:
            done.set()
        return web.Response()

    hooks = web.Application()
    hooks.router.add_post("/hook", receive)
    receiver = web.AppRunner(hooks, access_log=None)
    await receiver.setup()
    hook_port = free_port()
    await web.TCPSite(receiver, "127.0.0.1", hook_port).start()
    async with session.post(
        f"{url}/api/v2/webhooks",
        json={"url": f"http://127.0.0.1:{hook_port}/hook", "secret": "bench", "types": TYPES.split(",")},
        headers={"Authorization": "Bearer b"},
    ) as response:
        assert response.status == 201, await response.text()
    cpu_before = sum(process.cpu_times()[:2])
    begin = time.monotonic()
    hook_jobs = args.webhook_events // 5
    for first in range(0, hook_jobs, 100):
        batch = [e for n in range(first, min(hook_jobs, first + 100)) for e in lifecycle(f"hook{n}")]
        await asyncio.gather(*(publish_event(bus.js, e) for e in batch))
    await asyncio.wait_for(done.wait(), 300)
    took = time.monotonic() - begin
    cpu = sum(process.cpu_times()[:2]) - cpu_before
    print(
        f"webhooks: {got} deliveries in {took:.1f} s = {got / took:.0f}/s; "
        f"gateway CPU {cpu:.1f} s = {cpu / got * 1000:.2f} ms per delivery"
    )
    await receiver.cleanup()


async def serve_hook(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_post("/hook", handler)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}/hook"


async def failing(args: argparse.Namespace, session: aiohttp.ClientSession, url: str, bus: Bus) -> None:
    """4. N failing receivers beside one healthy one: the healthy one's publish-to-receipt delay."""
    received: dict[str, float] = {}
    attempts = {"500": 0, "hang": 0}
    done = asyncio.Event()
    wanted = (args.failing_events // 5) * 5

    async def healthy(request: web.Request) -> web.Response:
        body = await request.json()
        received[str(body["event_id"])] = time.time()
        if len(received) >= wanted:
            done.set()
        return web.Response()

    async def error(request: web.Request) -> web.Response:
        await request.read()
        attempts["500"] += 1
        return web.Response(status=500)

    async def hang(request: web.Request) -> web.Response:
        attempts["hang"] += 1
        await asyncio.sleep(3600)
        return web.Response()

    runners: list[web.AppRunner] = []
    targets: list[str] = []
    for n in range(args.failing_receivers):
        kind = n % 3
        if kind == 0:  # refused: a port nobody listens on
            targets.append(f"http://127.0.0.1:{free_port()}/hook")
            continue
        runner, target = await serve_hook(error if kind == 1 else hang)
        runners.append(runner)
        targets.append(target)
    good_runner, good_url = await serve_hook(healthy)
    runners.append(good_runner)
    for target in [*targets, good_url]:
        async with session.post(
            f"{url}/api/v2/webhooks",
            json={"url": target, "secret": "bench", "types": TYPES.split(",")},
            headers={"Authorization": "Bearer b"},
        ) as response:
            assert response.status == 201, await response.text()
    published: dict[str, float] = {}
    begin = time.monotonic()
    for n in range(wanted // 5):
        due = begin + n * 5 / args.failing_rate
        pause = due - time.monotonic()
        if pause > 0:
            await asyncio.sleep(pause)
        events = lifecycle(f"fail{n}")
        sent = time.time()
        for event in events:
            published[event.event_id] = sent
        await asyncio.gather(*(publish_event(bus.js, e) for e in events))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), 120)
    took = time.monotonic() - begin
    delays = [(t - published[key]) * 1000 for key, t in received.items() if key in published]
    print(
        f"failing: {args.failing_receivers} failing receivers (refused, 500, never answering) beside "
        f"one healthy; {wanted} events at {args.failing_rate:.0f}/s; healthy received "
        f"{len(delays)}/{wanted} in {took:.1f} s; publish-to-receipt p50 {percentile(delays, 0.5):.0f} ms, "
        f"p99 {percentile(delays, 0.99):.0f} ms, max {max(delays):.0f} ms; failing receivers saw "
        f"{attempts['500']} attempts answered 500 and {attempts['hang']} left unanswered; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    for runner in runners:
        await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--jobs-per-second", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--webhook-events", type=int, default=2000)
    parser.add_argument("--failing-receivers", type=int, default=20)
    parser.add_argument("--failing-events", type=int, default=500)
    parser.add_argument("--failing-rate", type=float, default=50.0, help="events a second")
    parser.add_argument("--phases", default="fanout,webhooks,failing")
    asyncio.run(main(parser.parse_args()))
