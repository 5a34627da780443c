"""Samples of this node and of every task running on it, under OpenPAI's metric names.

Tasks are found from `task.started` events (their pid leads a process group of their own) and
forgotten on `task.completed`. A task's CPU and memory are the sums over every process in its
group, so a training script's workers count too; its GPU use is the utilisation of the GPUs its
processes hold and the memory they use there. A task that shares a GPU (its placement in
`job.scheduled` carries `gpu_milli`) is also shown with its share of that device
(`task_gpu_share_milli`), and each shared device with the thousandths its running tasks hold
(`gpu_share_allocated_milli`, `gpu_share_tasks`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

from libs.protocol.telemetry import MetricSample
from services.monitor.adapters import gpus as gpu_module


@dataclass(frozen=True)
class TaskRef:
    job_id: str
    role: str
    index: int
    pid: int

    def labels(self) -> dict[str, str]:
        return {"job_id": self.job_id, "role": self.role, "index": str(self.index)}


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


class Collector:
    """Keeps psutil handles between calls: CPU percentages are measured from one call to the next."""

    def __init__(self, *, disk_path: str = "/") -> None:
        self.disk_path = disk_path
        self.tasks: dict[tuple[str, str, int], TaskRef] = {}
        # (job, role, index) -> (device, thousandths) of tasks placed here on a shared GPU.
        self.shares: dict[tuple[str, str, int], tuple[int, int]] = {}
        self._procs: dict[int, psutil.Process] = {}
        psutil.cpu_percent(None)

    def add_task(self, task: TaskRef) -> None:
        self.tasks[(task.job_id, task.role, task.index)] = task

    def set_share(self, job_id: str, role: str, index: int, gpu: int, milli: int) -> None:
        self.shares[(job_id, role, index)] = (gpu, milli)

    def remove_task(self, job_id: str, role: str | None = None, index: int | None = None) -> None:
        for table in (self.tasks, self.shares):
            for key in [
                k for k in table if k[0] == job_id and role in (None, k[1]) and index in (None, k[2])
            ]:
                del table[key]

    def share_samples(self) -> list[MetricSample]:
        """Each running task's share of its GPU, and what the running tasks hold of each shared GPU."""
        samples: list[MetricSample] = []
        per_gpu: dict[int, list[int]] = {}
        for key, task in self.tasks.items():
            share = self.shares.get(key)
            if share is None:
                continue
            gpu, milli = share
            labels = task.labels() | {"minor_number": str(gpu)}
            samples.append(MetricSample(name="task_gpu_share_milli", labels=labels, value=milli))
            per_gpu.setdefault(gpu, []).append(milli)
        for gpu, shares in sorted(per_gpu.items()):
            labels = {"minor_number": str(gpu)}
            samples.append(MetricSample(name="gpu_share_allocated_milli", labels=labels, value=sum(shares)))
            samples.append(MetricSample(name="gpu_share_tasks", labels=labels, value=len(shares)))
        return samples

    def _processes(self, group: int) -> list[psutil.Process]:
        members = []
        for proc in psutil.process_iter():
            if _group_of(proc.pid) != group:
                continue
            members.append(self._procs.setdefault(proc.pid, proc))
        return members

    def node_samples(self, gpus: list[gpu_module.Gpu]) -> list[MetricSample]:
        memory = psutil.virtual_memory()
        disk = psutil.disk_usage(self.disk_path)
        samples = [
            MetricSample(name="node_cpu_usage_percent", value=psutil.cpu_percent(None)),
            MetricSample(name="node_memory_usage_percent", value=memory.percent),
            MetricSample(
                name="node_filesystem_usage_percent",
                labels={"mountpoint": self.disk_path},
                value=disk.percent,
            ),
        ]
        for gpu in gpus:
            labels = {"minor_number": str(gpu.index), "uuid": gpu.uuid}
            samples += [
                MetricSample(name="gpu_utilization", labels=labels, value=gpu.utilization),
                MetricSample(name="gpu_mem_utilization", labels=labels, value=gpu.memory_utilization),
                MetricSample(
                    name="nvidiasmi_ecc_error_count", labels=labels | {"type": "single"}, value=gpu.ecc_single
                ),
                MetricSample(
                    name="nvidiasmi_ecc_error_count", labels=labels | {"type": "double"}, value=gpu.ecc_double
                ),
            ]
        return samples

    def task_samples(
        self, gpus: list[gpu_module.Gpu], users: list[gpu_module.GpuProcess]
    ) -> list[MetricSample]:
        by_uuid = {g.uuid: g for g in gpus}
        samples: list[MetricSample] = []
        live: set[int] = set()
        for task in list(self.tasks.values()):
            group = _group_of(task.pid)
            if group is None:
                continue  # ended; task.completed will remove it
            cpu = memory = 0.0
            pids = set()
            for proc in self._processes(group):
                try:
                    with proc.oneshot():
                        cpu += proc.cpu_percent(None)
                        memory += proc.memory_info().rss
                    pids.add(proc.pid)
                except psutil.Error:
                    continue
            live |= pids
            labels = task.labels()
            samples.append(MetricSample(name="task_cpu_percent", labels=labels, value=cpu))
            samples.append(MetricSample(name="task_mem_usage_byte", labels=labels, value=memory))
            held = [u for u in users if u.pid in pids and u.gpu_uuid in by_uuid]
            if held:
                devices = {u.gpu_uuid for u in held}
                percent = sum(by_uuid[d].utilization for d in devices) / len(devices)
                samples.append(MetricSample(name="task_gpu_percent", labels=labels, value=percent))
                used = sum(u.memory_used_mb for u in held) * 2**20
                samples.append(MetricSample(name="task_gpu_mem_usage_byte", labels=labels, value=used))
        for pid in [p for p in self._procs if p not in live]:
            del self._procs[pid]
        return samples

    def collect(self) -> list[MetricSample]:
        gpus, users = gpu_module.query()
        return self.node_samples(gpus) + self.task_samples(gpus, users) + self.share_samples()
