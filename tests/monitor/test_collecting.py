"""Per-task metrics over a real process group, and GPU attribution from nvidia-smi's answers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from services.monitor.adapters.collecting import Collector, TaskRef
from services.monitor.adapters.gpus import Gpu, GpuProcess

# A task that starts a worker of its own, as training scripts do.
SCRIPT = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "time.sleep(60)\n"
)


@pytest.fixture
def task_group() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", SCRIPT], start_new_session=True)
    try:
        yield process
    finally:
        for child in psutil.Process(process.pid).children(recursive=True):
            child.kill()
        process.kill()
        process.wait()


def _wait_for_children(pid: int) -> None:
    parent = psutil.Process(pid)
    for _ in range(500):
        if parent.children():
            return
        psutil.wait_procs([], timeout=0.01)
    raise AssertionError("the task's worker never started")


def test_a_tasks_memory_sums_every_process_of_its_group(task_group: subprocess.Popen[bytes]) -> None:
    _wait_for_children(task_group.pid)
    collector = Collector()
    collector.add_task(TaskRef("job1", "worker", 0, task_group.pid))
    samples = {s.name: s for s in collector.task_samples([], [])}
    root_rss = psutil.Process(task_group.pid).memory_info().rss
    assert samples["task_mem_usage_byte"].labels == {"job_id": "job1", "role": "worker", "index": "0"}
    assert samples["task_mem_usage_byte"].value > root_rss  # the worker counts too
    assert "task_cpu_percent" in samples
    assert "task_gpu_percent" not in samples  # no GPU held, no GPU figure


def test_a_task_holding_a_gpu_gets_its_utilisation_and_memory(task_group: subprocess.Popen[bytes]) -> None:
    gpus = [Gpu(0, "GPU-a", 7.0, 3.0, 100, 16000, 0, 0), Gpu(1, "GPU-b", 90.0, 50.0, 9000, 16000, 0, 0)]
    users = [GpuProcess(task_group.pid, "GPU-a", 512.0)]
    collector = Collector()
    collector.add_task(TaskRef("job1", "worker", 0, task_group.pid))
    samples = {s.name: s.value for s in collector.task_samples(gpus, users)}
    assert samples["task_gpu_percent"] == 7.0
    assert samples["task_gpu_mem_usage_byte"] == 512.0 * 2**20
    collector.remove_task("job1")
    assert collector.task_samples(gpus, users) == []


def test_node_samples_carry_openpai_gpu_names() -> None:
    gpu = Gpu(3, "GPU-c", 55.0, 20.0, 100, 16000, 1, 4)
    names = {(s.name, s.labels.get("type", "")): s.value for s in Collector().node_samples([gpu])}
    assert names[("gpu_utilization", "")] == 55.0
    assert names[("nvidiasmi_ecc_error_count", "double")] == 4.0
    assert ("node_memory_usage_percent", "") in names


def test_tasks_sharing_a_gpu_show_who_holds_how_much_of_it() -> None:
    collector = Collector()
    for index, (gpu, milli) in enumerate([(0, 500), (0, 250), (1, 500)]):
        collector.set_share("job1", "infer", index, gpu, milli)
        collector.add_task(TaskRef("job1", "infer", index, 10_000 + index))
    collector.set_share("job2", "infer", 0, 1, 300)  # placed, not started: not shown yet
    samples = collector.share_samples()
    tasks = {
        (s.labels["index"], s.labels["minor_number"]): s.value
        for s in samples
        if s.name == "task_gpu_share_milli"
    }
    assert tasks == {("0", "0"): 500, ("1", "0"): 250, ("2", "1"): 500}
    per_gpu = {
        (s.name, s.labels["minor_number"]): s.value for s in samples if s.name != "task_gpu_share_milli"
    }
    assert per_gpu == {
        ("gpu_share_allocated_milli", "0"): 750,
        ("gpu_share_tasks", "0"): 2,
        ("gpu_share_allocated_milli", "1"): 500,
        ("gpu_share_tasks", "1"): 1,
    }
    collector.remove_task("job1", "infer", 0)
    assert ("0", "0") not in {
        (s.labels["index"], s.labels["minor_number"])
        for s in collector.share_samples()
        if "index" in s.labels
    }
