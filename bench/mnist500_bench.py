"""A job of OpenPAI's CPU_500Task_MNIST shape on `pai up`, and the runtime's memory per task.

Starts the embedded platform (`pai up`'s code: NATS, every service a process, tasks as local
processes) in a temporary data dir, then:
  1. submits a job shaped like OpenPAI's examples/mnist_500_tasks (roles master x1 and
     taskrole x500, gang allocation off) whose tasks ask for cpu 0 and memoryMB 64 and run a
     command that prints and exits; reports seconds from POST to job.completed SUCCEEDED, to
     rest's detail saying SUCCEEDED, and the detail's answer time (median of 5, slowest);
  2. submits a job of W tasks that wait (`sleep`), and once all have started reports the
     resident memory of their runtime processes: RSS and USS (what each alone holds) per task,
     and in total; then stops it.

With --gang the job of part 1 keeps gang allocation on: no task's command starts before all
TASKS + 1 runtimes wait at the barrier; also reported then, the CPU time the task runtimes used
(the fork server's reaped children) and the machine's, from the POST to job.completed.

Command: .venv/bin/python bench/mnist500_bench.py [TASKS] [WAITING] [--gang]
(TASKS: the instances of taskrole, 500 as OpenPAI's; WAITING: the tasks of part 2, 100.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import nats
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from libs.protocol.events import JobCompleted, TaskStarted, decode_event
from pai.embedded.platform import EmbeddedPlatform, free_port, task_runtimes
from services.orchestrator.adapters.forking import FORK_SERVER_MODULE

# Their jobs name images such as python:3.11 that no machine here holds: tasks run on the host
# unless the run asks for an engine (PAI_TASK_ENGINE).
os.environ.setdefault("PAI_TASK_ENGINE", "host")

MNIST_SHAPE = """protocolVersion: 2
name: {name}
type: job
jobRetryCount: 0
prerequisites:
  - {{type: dockerimage, uri: 'openpai/standard:python_3.6-pytorch_1.4.0-cpu', name: docker_image_0}}
taskRoles:
  master:
    instances: 1
    completion: {{minFailedInstances: 1, minSucceededInstances: -1}}
    taskRetryCount: 0
    dockerImage: docker_image_0
    resourcePerInstance: {{gpu: 0, cpu: 0, memoryMB: 64}}
    commands:
      - echo master done
  taskrole:
    instances: {tasks}
    completion: {{minFailedInstances: 1, minSucceededInstances: -1}}
    taskRetryCount: 0
    dockerImage: docker_image_0
    resourcePerInstance: {{gpu: 0, cpu: 0, memoryMB: 64}}
    commands:
      - {command}
defaults: {{virtualCluster: default}}
extras: {{gangAllocation: {gang}}}
"""
PASSWORD = "bench-pass"


def mnist_job(
    name: str,
    tasks: int,
    command: str = "echo task $PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX done",
    gang: bool = False,
) -> str:
    return MNIST_SHAPE.format(name=name, tasks=tasks, command=command, gang=str(gang).lower())


def tasks_cpu(data_dir: Path) -> float:
    """CPU seconds of the task runtimes the platform's fork servers have reaped so far."""
    total = 0.0
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if FORK_SERVER_MODULE in cmdline and str(data_dir) in cmdline:
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                total += times.children_user + times.children_system
    return total


def machine_cpu() -> float:
    times = psutil.cpu_times()
    return times.user + times.system + times.nice


class Events:
    def __init__(self) -> None:
        self.started: dict[str, int] = {}
        self.completed: dict[str, JobCompleted] = {}
        self.changed = asyncio.Event()

    async def on_msg(self, msg: Any) -> None:
        event = decode_event(msg.data)
        if isinstance(event, TaskStarted):
            self.started[event.job_id] = self.started.get(event.job_id, 0) + 1
        elif isinstance(event, JobCompleted):
            self.completed[event.job_id] = event
        self.changed.set()

    async def until(self, ready: Any, within: float) -> None:
        async with asyncio.timeout(within):
            while not ready():
                self.changed.clear()
                await self.changed.wait()


async def detail_times(
    api: httpx.AsyncClient, name: str, runs: int = 5
) -> tuple[list[float], dict[str, Any], int]:
    times = []
    body: dict[str, Any] = {}
    size = 0
    for _ in range(runs):
        began = time.perf_counter()
        response = await api.get(f"/api/v2/jobs/admin~{name}")
        times.append(time.perf_counter() - began)
        body, size = response.json(), len(response.content)
    return times, body, size


async def main(tasks: int, waiting: int, gang: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        platform = EmbeddedPlatform(
            data_dir,
            api_port=free_port(),
            admin_password=PASSWORD,
            extra_env={"PAI_TASK_USER": "none", "PAI_RATE_LIMIT_API_PER_MIN": "10000000"},
        )
        info = await platform.start()
        try:
            nc = await nats.connect(info.nats_url, **info.nats_options())
            events = Events()
            await nc.jetstream().subscribe("pai.job.>", ordered_consumer=True, cb=events.on_msg)
            async with httpx.AsyncClient(base_url=info.api_url, timeout=60) as api:
                login = await api.post(
                    "/api/v2/authn/basic/login", json={"username": "admin", "password": PASSWORD}
                )
                api.headers["Authorization"] = f"Bearer {login.json()['token']}"

                began, cpu_before, tasks_before = time.perf_counter(), machine_cpu(), tasks_cpu(data_dir)
                response = await api.post(
                    "/api/v2/jobs",
                    content=mnist_job("mnist", tasks, gang=gang),
                    headers={"Content-Type": "text/yaml"},
                )
                assert response.status_code == 202, response.text
                job_id = response.json()["jobId"]
                await events.until(lambda: job_id in events.completed, 3600)
                completed = time.perf_counter() - began
                cpu = (
                    f"machine CPU {machine_cpu() - cpu_before:.1f} s, "
                    f"task runtimes {tasks_cpu(data_dir) - tasks_before:.1f} s"
                )
                state = events.completed[job_id].state
                while True:  # polled: the read model has no completion signal to await
                    if (await api.get("/api/v2/jobs/admin~mnist")).json()["jobStatus"]["state"] == state:
                        break
                    await asyncio.sleep(0.1)
                shown = time.perf_counter() - began
                times, body, size = await detail_times(api, "mnist")
                statuses = [s for role in body["taskRoles"].values() for s in role["taskStatuses"]]
                print(
                    f"CPU_500Task_MNIST shape, {tasks + 1} tasks (cpu 0, memoryMB 64, echo"
                    f"{', gang allocation on' if gang else ''}): {state} "
                    f"{completed:.1f} s after the POST ({cpu}), rest's detail says so after {shown:.1f} s; "
                    f"detail ({len(statuses)} task statuses, {size / 1e3:.0f} kB): "
                    f"median {statistics.median(times) * 1000:.0f} ms, slowest {max(times) * 1000:.0f} ms"
                )

                response = await api.post(
                    "/api/v2/jobs",
                    content=mnist_job("waiting", waiting - 1, "sleep 600"),
                    headers={"Content-Type": "text/yaml"},
                )
                assert response.status_code == 202, response.text
                waiter = response.json()["jobId"]
                began = time.perf_counter()
                await events.until(lambda: events.started.get(waiter, 0) >= waiting, 1800)
                all_started = time.perf_counter() - began
                runtimes = task_runtimes(data_dir)
                rss, uss = [], []
                for process in runtimes:
                    try:
                        memory = process.memory_full_info()
                    except psutil.Error:
                        continue
                    rss.append(memory.rss)
                    uss.append(memory.uss)
                mib = 2**20
                machine = psutil.virtual_memory().total / 2**30
                print(
                    f"{waiting} waiting tasks (all started {all_started:.1f} s after the POST): "
                    f"{len(rss)} runtime processes, RSS per task median "
                    f"{statistics.median(rss) / mib:.1f} MiB (USS {statistics.median(uss) / mib:.1f} MiB), "
                    f"together RSS {sum(rss) / mib:.0f} MiB, USS {sum(uss) / mib:.0f} MiB; "
                    f"machine memory {machine:.0f} GiB"
                )
                await api.put("/api/v2/jobs/admin~waiting/executionType", json={"value": "STOP"})
                await events.until(lambda: waiter in events.completed, 600)
            await nc.close()
        finally:
            await platform.stop()


if __name__ == "__main__":
    numbers = [int(arg) for arg in sys.argv[1:] if arg != "--gang"]
    tasks, waiting = (numbers + [500, 100][len(numbers) :])[:2]
    asyncio.run(main(tasks, waiting, gang="--gang" in sys.argv))
