"""Attack on the whole platform: a billion-task job, refused at the door and, past it, by the scheduler.

`instances: 1000000000` used to be accepted and the scheduler then grew without bound, stopped
deciding for everyone, and blew up again after every restart. Now REST answers 400 naming the
limit; a job of that size that reaches the stream anyway (an entry from before the limits) is
failed by the scheduler with its reason at once, a restart of the scheduler refuses it again
cheaply, and an ordinary 1-task job runs to success right after each step.
"""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pytest

from libs.backbone.topology import publish_event
from libs.protocol.events import JobSubmitted
from tests.e2e.platform import job_yaml, running_platform
from tests.support.jobs import job_model
from tests.support.waiting import eventually, polled

pytestmark = pytest.mark.timeout(240)
RESOURCES = {"cpu": 1, "memoryMB": 128, "gpu": 0}


def one_task(name: str) -> str:
    return job_yaml(name, {"main": {"commands": ["echo done"]}})


async def test_a_billion_instances_is_a_400_and_past_rest_a_failed_job_while_small_jobs_run(
    tmp_path: Path,
) -> None:
    async with running_platform(tmp_path / "data") as platform:
        huge = job_yaml("huge", {"main": {"instances": 1_000_000_000, "commands": ["true"]}})
        refused = await platform.api.post("/api/v2/jobs", content=huge, headers={"Content-Type": "text/yaml"})
        assert refused.status_code == 400
        assert "taskRoles.main.instances" in refused.json()["message"]
        assert "limit of 10,000 instances per task role" in refused.json()["message"]
        first = await platform.submit(one_task("first"))
        assert (await platform.completed(first)).state == "SUCCEEDED"

        # The same job straight onto the bus, as an entry written before the limits would be.
        rogue = JobSubmitted(
            job_id=uuid.uuid4().hex,
            user="admin",
            name="rogue",
            virtual_cluster="default",
            config=job_model(
                {
                    "protocolVersion": 2,
                    "name": "rogue",
                    "type": "job",
                    "taskRoles": {
                        "main": {
                            "instances": 1_000_000_000,
                            "resourcePerInstance": {"cpu": 1, "memoryMB": 128, "gpu": 0},
                        }
                    },
                }
            ),
        )
        await publish_event(platform.nc.jetstream(), rogue)
        failed = await platform.completed(rogue.job_id, within=60)
        assert failed.state == "FAILED"
        assert "1,000,000,000 tasks" in failed.diagnostics
        detail = await platform.detail("rogue")
        assert detail["jobStatus"]["state"] == "FAILED"
        assert len(detail["taskRoles"]["main"]["taskStatuses"]) == 10_000, "a bounded answer"
        second = await platform.submit(one_task("second"))
        assert (await platform.completed(second)).state == "SUCCEEDED"

        # A restarted scheduler replays the stream, the rogue job included, and still places jobs.
        scheduler = platform.child("scheduler")
        old_pid = scheduler.process.pid
        os.kill(old_pid, signal.SIGKILL)
        await eventually(
            polled(lambda: getattr(scheduler.process, "pid", None)),
            lambda pid: pid not in (None, old_pid) and scheduler.restarts >= 1,
        )
        third = await platform.submit(one_task("third"))
        assert (await platform.completed(third)).state == "SUCCEEDED"
        assert len(platform.watcher.of("job.completed", rogue.job_id)) == 1, "failed once, not again"
