"""REST: the detail of a large job (GET /api/v2/jobs/{user}~{name}), and where its time goes.

A job of TASKS tasks is submitted over HTTP to the REST app (a real nats-server, SQLite by
default or PAI_BENCH_DATABASE_URL) and its lifecycle applied to the read model by the projection:
placement and every task started; then the detail is asked for once (the first request, nothing
kept); then the task completions are applied BATCH at a time, the detail asked for after each
batch (a request after a change of BATCH tasks, as a client polling a running job sees it); then
the job completed, and the detail asked for RUNS times. Printed: those figures, the answer's
size, and the parts of a full build (the SQL read of the tasks, building and encoding each
status, joining them) timed alone; a full build is what the first request after rest starts pays.

Command: .venv/bin/python bench/rest_detail_bench.py [TASKS] [RUNS] [BATCH]
(BATCH: events per projection transaction, 64 by default as the service's consume loop hands
them in)
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from libs.backbone.logging import configure_logging
from libs.backbone.natsserver import EmbeddedNats
from libs.protocol.events import (
    EventBase,
    JobCompleted,
    JobScheduled,
    JobState,
    TaskCompleted,
    TaskPlacement,
    TaskStarted,
)
from services.rest.adapters.database import create_engine
from services.rest.adapters.jobs_store import task_rows
from services.rest.app import build_app
from services.rest.core.task_table import TaskTable
from services.rest.handlers import apply_events
from services.rest.settings import RestSettings

JOB = """protocolVersion: 2
name: {name}
type: job
prerequisites:
  - {{name: image, type: dockerimage, uri: python:3.11}}
taskRoles:
  worker:
    instances: {tasks}
    dockerImage: image
    resourcePerInstance: {{cpu: 0, memoryMB: 64, gpu: 0}}
    commands: [echo hi]
"""


def lifecycle(job_id: str, tasks: int) -> list[EventBase]:
    placements = tuple(
        TaskPlacement(role="worker", index=i, node="node-a", node_address="10.0.0.1") for i in range(tasks)
    )
    events: list[EventBase] = [JobScheduled(job_id=job_id, attempt=0, placements=placements)]
    events += [
        TaskStarted(job_id=job_id, attempt=0, role="worker", index=i, node="node-a", pid=1000 + i)
        for i in range(tasks)
    ]
    events += [
        TaskCompleted(job_id=job_id, attempt=0, role="worker", index=i, exit_code=0) for i in range(tasks)
    ]
    events.append(JobCompleted(job_id=job_id, attempt=0, state=JobState.SUCCEEDED, exit_code=0))
    return events


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


async def main(tasks: int, runs: int, batch: int) -> None:
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
                rate_limit_api_per_min=10_000_000,
            )
            configure_logging(settings)
            client: TestClient[Any, Any] = TestClient(TestServer(build_app(settings)))
            await client.start_server()
            try:
                login = await client.post(
                    "/api/v2/authn/basic/login", data={"username": "admin", "password": "bench-password"}
                )
                headers = {"Authorization": f"Bearer {(await login.json())['token']}"}
                response = await client.post(
                    "/api/v2/jobs",
                    data=JOB.format(name="large", tasks=tasks),
                    headers={**headers, "Content-Type": "text/yaml"},
                )
                assert response.status == 202, await response.text()
                job_id = (await response.json())["jobId"]
                engine = create_engine(settings.resolved_database_url())
                events = lifecycle(job_id, tasks)
                running, completions, end = events[: 1 + tasks], events[1 + tasks : -1], events[-1:]

                async def ask() -> float:
                    began = time.perf_counter()
                    await get_detail(client, headers)
                    return time.perf_counter() - began

                applied = 0.0
                for start in range(0, len(running), batch):  # as the consume loop hands them in
                    began = time.perf_counter()
                    await apply_events(engine, running[start : start + batch])
                    applied += time.perf_counter() - began
                first = await ask()
                after_change = []
                for start in range(0, len(completions), batch):
                    began = time.perf_counter()
                    await apply_events(engine, completions[start : start + batch])
                    applied += time.perf_counter() - began
                    after_change.append(await ask())
                began = time.perf_counter()
                await apply_events(engine, end)
                applied += time.perf_counter() - began
                times = []
                size = 0
                for _ in range(runs):
                    began = time.perf_counter()
                    body = await get_detail(client, headers)
                    times.append(time.perf_counter() - began)
                    size = len(body)
                parsed = json.loads(body)
                assert parsed["jobStatus"]["state"] == "SUCCEEDED", parsed["jobStatus"]
                assert len(parsed["taskRoles"]["worker"]["taskStatuses"]) == tasks
                restarted = await first_after_start(settings, headers, body)
                began = time.perf_counter()
                rows = await task_rows(engine, job_id, 0)
                read = time.perf_counter() - began
                began = time.perf_counter()
                table, job = TaskTable(0), _job_row(parsed, job_id)
                table.apply(job, rows, 1)  # each status built and encoded
                building = time.perf_counter() - began
                began = time.perf_counter()
                table.encoded(job)  # the pieces joined
                encoding = time.perf_counter() - began
                await engine.dispose()
            finally:
                await client.close()
    print(
        f"detail of a {tasks}-task job: first request {ms(first)}; after each change of {batch} tasks "
        f"({len(after_change)} requests) median {ms(statistics.median(after_change))}, "
        f"slowest {ms(max(after_change))}; unchanged ({runs} runs) median {ms(statistics.median(times))}, "
        f"slowest {ms(max(times))}; the job over, first request after rest starts {ms(restarted)}; "
        f"{size / 1e6:.1f} MB; a full build's parts: SQL read of the tasks "
        f"{ms(read)}, statuses built and encoded {ms(building)}, joined {ms(encoding)} "
        f"(the lifecycle's {3 * tasks + 2} events projected in batches of {batch} in {applied:.1f} s, "
        f"{applied / (3 * tasks + 2) * 1000:.2f} ms an event)"
    )


async def get_detail(client: TestClient[Any, Any], headers: dict[str, str]) -> bytes:
    """The job's detail through the client's session: the test client's own `get` keeps every
    response (and its body, ten megabytes here) until it closes, which grew this process by a
    gigabyte and a half over the requests of a run and slowed the later ones."""
    async with client.session.get(client.make_url("/api/v2/jobs/admin~large"), headers=headers) as detail:
        body = await detail.read()
        assert detail.status == 200, body[:200]
        return body


async def first_after_start(settings: RestSettings, headers: dict[str, str], expected: bytes) -> float:
    """The detail of the job, over, from a REST app started afresh on the same read model:
    nothing kept, every task's status read, built and encoded (with its exit spec), as the first
    client after a restart of rest sees it."""
    client: TestClient[Any, Any] = TestClient(TestServer(build_app(settings)))
    await client.start_server()
    try:
        began = time.perf_counter()
        body = await get_detail(client, headers)
        took = time.perf_counter() - began
        assert json.loads(body)["taskRoles"] == json.loads(expected)["taskRoles"]
        return took
    finally:
        await client.close()


def _job_row(detail: dict[str, Any], job_id: str) -> dict[str, Any]:
    """What a task table reads of a job row, from the detail itself."""
    statuses = detail["taskRoles"]["worker"]["taskStatuses"]
    return {
        "id": job_id,
        "username": detail["jobStatus"]["username"],
        "name": detail["name"],
        "config": {"taskRoles": {"worker": {"instances": len(statuses)}}},
    }


if __name__ == "__main__":
    numbers = [int(arg) for arg in sys.argv[1:4]]
    asyncio.run(main(*(numbers + [10_000, 5, 64][len(numbers) :])))
