"""A task is held to what its job asked for: memory, CPU, processes and GPUs, by the kernel.

Each test runs real tasks through the local executor of a root platform with the machine's
cgroups (as ``pai up`` does) and tries to take more than the task's resourcePerInstance.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from libs.failures import analyze, default_rules, retry_decision
from libs.protocol import masked_config, parse_job
from libs.protocol.events import JobScheduled, TaskPlacement
from services.orchestrator.adapters.confinement import Confinement, TaskGroups, detect
from services.orchestrator.adapters.executing import ContainmentError, TaskExit
from services.orchestrator.adapters.isolation import resolve_task_users
from services.orchestrator.adapters.local import OOM_EXIT_CODE, LocalExecutor
from services.orchestrator.core.deciders import decide
from services.orchestrator.core.effects import Context
from services.orchestrator.core.frameworks import Framework, TaskKey
from services.orchestrator.core.limits import LimitDefaults
from tests.orchestrator.sim import T0, submitted
from tests.support.waiting import eventually, polled

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(os.geteuid() != 0, reason="cgroups and task users need a root platform"),
]

KEY = TaskKey(0, "worker", 0, 0)


def job(command: str, *, cpu: float = 1, memory_mb: int = 128, gpu: int = 0) -> dict[str, Any]:
    doc = {
        "protocolVersion": 2,
        "name": "limits",
        "type": "job",
        "prerequisites": [{"name": "img", "type": "dockerimage", "uri": "busybox"}],
        "taskRoles": {
            "worker": {
                "instances": 1,
                "dockerImage": "img",
                "resourcePerInstance": {"cpu": cpu, "memoryMB": memory_mb, "gpu": gpu},
                "commands": [command],
            }
        },
    }
    return masked_config(parse_job(json.dumps(doc)))  # JSON is YAML


def framework(config: dict[str, Any], job_id: str, gpus: tuple[int, ...] = ()) -> Framework:
    fw = decide(None, submitted(config, job_id=job_id), Context(now=T0)).framework
    placement = TaskPlacement(
        role="worker", index=0, node="local", node_address="127.0.0.1", gpu_indices=gpus
    )
    fw = decide(
        fw, JobScheduled(job_id=job_id, attempt=0, placements=(placement,)), Context(now=T0)
    ).framework
    assert fw is not None
    return fw


@pytest.fixture
def data_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="pai-limits-") as base:
        os.chmod(base, 0o755)
        yield Path(base) / "data"


class Tasks:
    def __init__(self, executor: LocalExecutor) -> None:
        self.executor = executor
        self.exits: asyncio.Queue[TaskExit] = asyncio.Queue()

    async def run(self, fw: Framework) -> tuple[TaskExit, str]:
        _, directory = await self.executor.start(fw, KEY)
        done = await asyncio.wait_for(self.exits.get(), 90)
        return done, (directory / "logs" / "user.pai.all").read_text()


async def _tasks(data_dir: Path, defaults: LimitDefaults) -> AsyncIterator[Tasks]:
    async def no_secrets(_job_id: str) -> None:
        return None

    await asyncio.to_thread(data_dir.mkdir, parents=True)
    queue: asyncio.Queue[TaskExit] = asyncio.Queue()
    executor = LocalExecutor(
        data_dir,
        queue.put,
        no_secrets,
        poll_seconds=0.05,
        task_users=resolve_task_users("auto", data_dir, registry=str(data_dir.parent / "uids")),
        confinement=TaskGroups(detect(data_dir), defaults),
    )
    tasks = Tasks(executor)
    tasks.exits = queue
    try:
        yield tasks
    finally:
        await executor.close()


@pytest.fixture
async def tasks(data_dir: Path) -> AsyncIterator[Tasks]:
    async for t in _tasks(data_dir, LimitDefaults()):
        yield t


HOLD = (
    'python3 -c \'b = bytearray({mb} * 1024 * 1024); b[::4096] = b"x" * len(b[::4096]); print("he" + "ld")\''
)


async def test_a_task_over_its_memory_is_killed_and_ends_with_openpais_oom_code(tasks: Tasks) -> None:
    assert tasks.executor.groups.uses_cgroups, tasks.executor.groups.confinement.describe()
    done, log = await tasks.run(framework(job(HOLD.format(mb=1024), memory_mb=128), "greedy"))
    assert done.exit_code == OOM_EXIT_CODE, log
    assert "held" not in log
    assert done.failure is not None
    assert done.failure.phrase == "UserContainerDockerOOMKilled"
    assert done.failure.type == "permanent"
    assert "memory limit of 128 MiB" in done.diagnostics
    assert "peak 128 MiB" in done.diagnostics


async def test_a_task_within_its_memory_succeeds(tasks: Tasks) -> None:
    done, log = await tasks.run(framework(job(HOLD.format(mb=32), memory_mb=128), "modest"))
    assert done.exit_code == 0, log
    assert "held" in log


BUSY = (
    "python3 -c 'import os, resource, time\n"
    # The quota of the CPU group the task is in, as the task itself sees it.
    'for line in open("/proc/self/cgroup"):\n'
    '    _, controllers, path = line.strip().split(":", 2)\n'
    '    if "cpu" in controllers.split(","):\n'
    '        group = "/sys/fs/cgroup/" + controllers + path\n'
    '        quota = int(open(group + "/cpu.cfs_quota_us").read())\n'
    '        period = int(open(group + "/cpu.cfs_period_us").read())\n'
    '        print("quota", quota / period)\n'
    "kids = []\n"
    "for _ in range(4):\n"
    "    pid = os.fork()\n"
    "    if pid == 0:\n"
    "        end = time.monotonic() + 5\n"
    "        while time.monotonic() < end: pass\n"
    "        os._exit(0)\n"
    "    kids.append(pid)\n"
    "start = time.monotonic()\n"
    "for pid in kids: os.waitpid(pid, 0)\n"
    "used = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    'print("cores", (used.ru_utime + used.ru_stime) / (time.monotonic() - start))\''
)


def figure(log: str, name: str) -> float:
    return float(log.split(f"{name} ")[1].split()[0])


async def test_a_task_of_one_cpu_with_four_busy_processes_uses_at_most_one_core(tasks: Tasks) -> None:
    done, log = await tasks.run(framework(job(BUSY, cpu=1), "busy"))
    assert done.exit_code == 0, log
    # Held to one core by its group's quota, however busy the machine is besides.
    assert figure(log, "quota") == 1.0, log
    assert 0 < figure(log, "cores") <= 1.1, log


async def test_a_task_of_no_cpu_reservation_is_still_held_to_one_core(tasks: Tasks) -> None:
    done, log = await tasks.run(framework(job(BUSY, cpu=0), "zero"))
    assert done.exit_code == 0, log
    assert figure(log, "quota") == 1.0, log
    assert 0 < figure(log, "cores") <= 1.1, log


@pytest.fixture
def gpu_nodes() -> Iterator[Path]:
    """Device nodes of two NVIDIA GPUs (major 195) in a folder of the test's: no driver answers
    them, so opening an allowed one fails with ENXIO, a denied one with EPERM first."""
    with tempfile.TemporaryDirectory(prefix="pai-dev-") as base:
        os.chmod(base, 0o755)
        for minor in (0, 1):
            path = Path(base) / f"nvidia{minor}"
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(195, minor))
            os.chmod(path, 0o666)
        yield Path(base)


async def test_a_task_opens_only_the_gpus_it_was_given(tasks: Tasks, gpu_nodes: Path) -> None:
    probe = (
        "python3 -c 'import errno, os, sys\n"
        "for name in sys.argv[1:]:\n"
        "    try: os.close(os.open(name, os.O_RDWR))\n"
        "    except OSError as e: print(os.path.basename(name), errno.errorcode[e.errno])' "
        f"{gpu_nodes}/nvidia0 {gpu_nodes}/nvidia1"
    )
    done, log = await tasks.run(framework(job(probe, gpu=1), "gpu", gpus=(0,)))
    assert done.exit_code == 0, log
    assert "nvidia0 ENXIO" in log  # given: the kernel let it through to a driver that is not there
    assert "nvidia1 EPERM" in log  # not given: the devices cgroup refused it


async def test_a_tasks_cgroups_are_gone_once_it_has_ended(tasks: Tasks) -> None:
    done, _ = await tasks.run(framework(job("sleep 30 & echo left a child behind"), "leftovers"))
    assert done.exit_code == 0
    bases = tasks.executor.groups.confinement.bases.values()

    def groups_left() -> list[Path]:
        return [g for base in bases for g in base.iterdir() if g.is_dir()]

    # The leftover child is killed, then its groups removed, a moment after the task's end.
    assert await eventually(polled(groups_left), lambda left: left == [], within=10) == []


async def test_a_task_whose_limits_cannot_be_set_never_runs_and_is_retried_as_a_platform_failure(
    data_dir: Path,
) -> None:
    async def no_secrets(_job_id: str) -> None:
        return None

    await asyncio.to_thread(data_dir.mkdir, parents=True)
    blocked = data_dir / "a-file"
    await asyncio.to_thread(blocked.write_text, "not a cgroup folder")
    broken = Confinement("cgroup v1", {"memory": "cgroup v1"}, {}, {"memory": blocked / "pai-x"})
    executor = LocalExecutor(
        data_dir,
        asyncio.Queue[TaskExit]().put,
        no_secrets,
        task_users=resolve_task_users("auto", data_dir, registry=str(data_dir.parent / "uids")),
        confinement=TaskGroups(broken),
    )
    try:
        with pytest.raises(
            ContainmentError, match=r"the task's limits could not be set: cannot create the cgroup"
        ):
            await executor.start(framework(job("echo ran"), "unlimited"), KEY)
    finally:
        await executor.close()
    assert not (executor.task_dir("unlimited", KEY) / "pid").exists()
    verdict = analyze(default_rules(), exit_code=ContainmentError.exit_code, stage="platform")
    assert (verdict.phrase, verdict.type) == ("RuntimeConfineFailed", "transient")
    assert retry_decision(verdict) == "retry_free"
