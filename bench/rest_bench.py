"""REST service throughput: job submissions over HTTP, and the projection catching up on events.

Runs a real nats-server and the REST app (SQLite by default, or PAI_BENCH_DATABASE_URL) on
this machine, then:
  1. submits N jobs with C concurrent HTTP clients and reports submissions per second;
  2. publishes a lifecycle of 6 events per job straight to the stream and reports how fast the
     projection applies them (events per second until every job reads SUCCEEDED).

Command: .venv/bin/python bench/rest_bench.py [N] [C]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from libs.backbone.connecting import connect
from libs.backbone.logging import configure_logging
from libs.backbone.natsserver import EmbeddedNats
from libs.backbone.topology import publish_event
from libs.protocol.events import (
    JobCompleted,
    JobScheduled,
    JobState,
    TaskCompleted,
    TaskPlacement,
    TaskStarted,
)
from services.rest.app import build_app
from services.rest.settings import RestSettings

JOB = """protocolVersion: 2
name: {name}
type: job
prerequisites:
  - {{name: image, type: dockerimage, uri: python:3.11}}
taskRoles:
  worker:
    instances: 1
    dockerImage: image
    resourcePerInstance: {{cpu: 1, memoryMB: 512, gpu: 1}}
    commands: [echo hi]
"""


async def main(total: int, concurrency: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        async with EmbeddedNats(root / "nats") as nats:
            settings = RestSettings(
                nats_url=nats.url,
                data_dir=root / "data",
                database_url=os.environ.get("PAI_BENCH_DATABASE_URL") or None,
                admin_password="bench-password",
                log_level="warning",
                log_format="json",
                # One busy client: rate limits far above what it sends (still counted, never hit).
                rate_limit_api_per_min=10_000_000,
                rate_limit_list_job_per_min=10_000_000,
                rate_limit_submit_job_per_hour=10_000_000,
            )
            configure_logging(settings)
            client: TestClient[Any, Any] = TestClient(TestServer(build_app(settings)))
            await client.start_server()
            try:
                login = await client.post(
                    "/api/v2/authn/basic/login", data={"username": "admin", "password": "bench-password"}
                )
                headers = {
                    "Authorization": f"Bearer {(await login.json())['token']}",
                    "Content-Type": "text/yaml",
                }
                latencies: list[float] = []
                ids: list[str] = []
                queue = list(range(total))

                async def worker() -> None:
                    while queue:
                        n = queue.pop()
                        started = time.perf_counter()
                        response = await client.post(
                            "/api/v2/jobs", data=JOB.format(name=f"b{n}"), headers=headers
                        )
                        latencies.append(time.perf_counter() - started)
                        assert response.status == 202, await response.text()
                        ids.append((await response.json())["jobId"])

                started = time.perf_counter()
                await asyncio.gather(*(worker() for _ in range(concurrency)))
                elapsed = time.perf_counter() - started
                latencies.sort()
                print(
                    f"submit: {total} jobs, {concurrency} clients: {elapsed:.2f} s, "
                    f"{total / elapsed:.0f} jobs/s"
                )
                print(
                    f"submit latency: p50 {statistics.median(latencies) * 1000:.1f} ms, "
                    f"p99 {latencies[int(len(latencies) * 0.99) - 1] * 1000:.1f} ms"
                )

                bus = await connect(nats.url, name="bench", initial_timeout=10)
                placement = (TaskPlacement(role="worker", index=0, node="n", node_address="10.0.0.1"),)
                started = time.perf_counter()
                for job_id in ids:
                    for event in (
                        JobScheduled(job_id=job_id, attempt=0, placements=placement),
                        TaskStarted(job_id=job_id, attempt=0, role="worker", index=0, node="n"),
                        TaskCompleted(job_id=job_id, attempt=0, role="worker", index=0, exit_code=0),
                        JobCompleted(job_id=job_id, attempt=0, state=JobState.SUCCEEDED, exit_code=0),
                    ):
                        await publish_event(bus.js, event)
                published = time.perf_counter() - started
                while True:
                    listed = await client.get(
                        "/api/v2/jobs?state=SUCCEEDED&withTotalCount=true&limit=1", headers=headers
                    )
                    if (await listed.json())["totalCount"] == total:
                        break
                    await asyncio.sleep(0.05)
                elapsed = time.perf_counter() - started
                events = total * 5  # submitted + the 4 above
                print(
                    f"projection: {events} events applied in {elapsed:.2f} s "
                    f"({events / elapsed:.0f} events/s; "
                    f"publishing alone took {published:.2f} s)"
                )
                started = time.perf_counter()
                for _ in range(20):
                    await client.get("/api/v2/jobs?limit=100&keyword=b1", headers=headers)
                print(
                    f"list (keyword, limit 100) over {total} jobs: "
                    f"{(time.perf_counter() - started) / 20 * 1000:.1f} ms"
                )
                await bus.close()
            finally:
                await client.close()


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    clients = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    asyncio.run(main(count, clients))
