"""Helpers of the VC service tests: a HiveD cluster on file, GPU nodes, GPU jobs, a scheduler."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import nats.errors
import yaml

from libs.backbone.connecting import Bus
from libs.protocol.events import JobSubmitted, NodeReported
from services.scheduler.app import SchedulerSettings, main
from tests.scheduler.clusters import two_rack_config
from tests.support.jobs import job_model

GPU_NODES = [
    NodeReported(
        node_id=f"n{i}",
        name=f"n{i}",
        address=f"10.0.0.{i}",
        cpu=32,
        memory_mb=262144,
        gpus=4,
        gpu_model="A100",
    )
    for i in range(4)
]


def cluster_file(tmp_path: Path, config: dict[str, Any] | None = None) -> Path:
    path = tmp_path / "hived.yaml"
    path.write_text(yaml.safe_dump(config or two_rack_config()))
    return path


def gpu_job(job_id: str, vc: str, gpus: int, user: str = "alice", instances: int = 1) -> JobSubmitted:
    config: dict[str, Any] = {
        "taskRoles": {
            "worker": {
                "instances": instances,
                "resourcePerInstance": {"cpu": 2, "memoryMB": 1024, "gpu": gpus},
            }
        }
    }
    return JobSubmitted(job_id=job_id, user=user, name=job_id, virtual_cluster=vc, config=job_model(config))


@asynccontextmanager
async def scheduler(url: str, hived: Path | None) -> AsyncIterator[asyncio.Task[None]]:
    stop = asyncio.Event()
    settings = SchedulerSettings(nats_url=url, instance="s1", service_name="scheduler", hived_config=hived)
    task = asyncio.create_task(main(settings, stop))
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


async def ask(bus: Bus, subject: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    """Ask the scheduler, retrying while it is still starting (no responder, or replaying)."""
    for _ in range(100):
        try:
            reply = await bus.nc.request(subject, json.dumps(payload or {}).encode(), timeout=5)
        except nats.errors.NoRespondersError:
            await asyncio.sleep(0.05)  # the scheduler has not subscribed yet: nothing to await
            continue
        answer: dict[str, Any] = json.loads(reply.data)
        if answer.get("error") == "unavailable" and "rebuilding" in str(answer.get("message")):
            await asyncio.sleep(0.05)  # still replaying the streams at start
            continue
        return answer
    raise AssertionError(f"nobody answered on {subject}")
