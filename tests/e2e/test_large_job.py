"""A job of OpenPAI's CPU_500Task_MNIST shape on `pai up`: many CPU-light tasks that print and exit.

The full 501-task job is a bench (bench/mnist500_bench.py: about a minute or more on two
cores); here the same shape with fewer tasks keeps the test quick.
"""

from __future__ import annotations

from pathlib import Path

from bench.mnist500_bench import mnist_job
from tests.e2e.platform import running_platform

TASKS = 40  # taskrole's instances; master makes one more


async def test_a_job_of_the_mnist_500_shape_succeeds_and_lists_every_task(tmp_path: Path) -> None:
    async with running_platform(tmp_path / "data") as platform:
        job_id = await platform.submit(mnist_job("mnist", TASKS))
        done = await platform.completed(job_id, within=240)
        assert done.state == "SUCCEEDED", done.diagnostics
        detail = await platform.detail("mnist")
        assert detail["jobStatus"]["state"] == "SUCCEEDED"
        roles = detail["taskRoles"]
        assert [len(roles[r]["taskStatuses"]) for r in ("master", "taskrole")] == [1, TASKS]
        assert {s["taskState"] for r in roles.values() for s in r["taskStatuses"]} == {"SUCCEEDED"}
        log = await platform.log("mnist", "taskrole", TASKS - 1)
        assert f"task {TASKS - 1} done" in log
