"""A task's container arguments, decided without an engine, and image references at submission."""

from __future__ import annotations

import pytest

from libs.protocol.errors import JobProtocolError
from libs.protocol.validation import parse_job
from services.orchestrator.core.containers import (
    ContainerPlan,
    container_name,
    gpu_arguments,
    run_arguments,
)


def _plan(**changes: object) -> ContainerPlan:
    values: dict[str, object] = {
        "engine": "podman",
        "image": "sha256:abc",
        "name": container_name("job-1", 0, "worker", 2, 1),
        "user": "1800000001:1800000001",
        "work_dir": "/data/tasks/job-1/work",
        "labels": (("ai.pai.job", "job-1"),),
        "memory_mb": 1024,
        "cpus": 2,
        "pids": 4096,
        "cgroup_parent": "/pai-x/job-1.0.worker-2.1",
    }
    values.update(changes)
    return ContainerPlan(**values)  # type: ignore[arg-type]


def _option(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


def test_a_task_runs_on_the_host_network_as_its_uid_in_its_work_dir_under_its_cgroup() -> None:
    args = run_arguments(_plan())
    assert args[:2] == ["run", "--rm"]
    assert "--init" in args
    assert "-i" in args
    assert _option(args, "--network") == ["host"]
    assert _option(args, "--user") == ["1800000001:1800000001"]
    assert _option(args, "--workdir") == ["/data/tasks/job-1/work"]
    assert "/data/tasks/job-1/work:/data/tasks/job-1/work" in _option(args, "--volume")
    assert _option(args, "--cgroup-parent") == ["/pai-x/job-1.0.worker-2.1"]
    assert _option(args, "--memory") == []  # the task's group holds the memory limit: its OOM is the task's
    assert _option(args, "--shm-size") == ["512m"]
    assert _option(args, "--pids-limit") == ["4096"]
    assert _option(args, "--pull") == ["never"]  # the executor pulled it already, or refused
    assert _option(args, "--name") == ["pai-job-1-0-worker-2-1"]


def test_without_a_task_cgroup_the_container_gets_the_memory_limit_itself() -> None:
    args = run_arguments(_plan(cgroup_parent=None, memory_mb=64))
    assert _option(args, "--memory") == ["64m"]
    assert _option(args, "--memory-swap") == ["64m"]
    assert _option(args, "--shm-size") == ["64m"]  # never below 64 MiB


def test_gpus_by_cdi_by_dockers_flag_or_by_device_nodes() -> None:
    assert gpu_arguments("podman", (1, 3), cdi=True) == [
        "--device",
        "nvidia.com/gpu=1",
        "--device",
        "nvidia.com/gpu=3",
    ]
    assert gpu_arguments("docker", (0, 2), cdi=False) == ["--gpus", "device=0,2"]
    nodes = _option(gpu_arguments("podman", (2,), cdi=False), "--device")
    assert "/dev/nvidia2" in nodes
    assert "/dev/nvidiactl" in nodes
    assert "/dev/nvidia0" not in nodes
    assert gpu_arguments("podman", (), cdi=True) == []


def test_container_names_are_safe_and_one_per_task_attempt() -> None:
    assert container_name("u", 0, "r", 0, 0) != container_name("u", 0, "r", 0, 1)
    assert container_name("u", 0, "wörker/x", 0, 0) == "pai-u-0-w_rker_x-0-0"


@pytest.mark.parametrize("uri", ["Ubuntu:22.04", "ubuntu 22.04", "ubuntu::1", "-x"])
def test_an_image_that_is_not_a_reference_is_refused_naming_its_field(uri: str) -> None:
    job = (
        "protocolVersion: 2\nname: j\ntype: job\n"
        f"prerequisites:\n  - {{name: image, type: dockerimage, uri: '{uri}'}}\n"
        "taskRoles:\n  main:\n    dockerImage: image\n"
        "    resourcePerInstance: {cpu: 1, memoryMB: 128, gpu: 0}\n    commands: [echo]\n"
    )
    with pytest.raises(JobProtocolError) as refused:
        parse_job(job)
    [problem] = [p for p in refused.value.problems if p.path == "prerequisites[0].uri"]
    assert "docker image reference" in problem.message
    assert "name[:tag]" in problem.hint


def test_cpus_labels_mounts_logs_and_gpus_reach_the_run_arguments() -> None:
    args = run_arguments(
        _plan(
            cpus=1.5,
            labels=(("ai.pai.job", "job-1"), ("ai.pai.task", "0.worker-2.1")),
            mounts=(("/data/set", "/mnt/set", True), ("/mps", "/mps", False)),
            gpus=(3,),
            cdi=True,
        )
    )
    assert _option(args, "--cpus") == ["1.5"]
    assert _option(args, "--log-driver") == ["none"]  # the runtime captures the output, not the engine
    assert _option(args, "--label") == ["ai.pai.job=job-1", "ai.pai.task=0.worker-2.1"]
    assert _option(args, "--volume")[1:] == ["/data/set:/mnt/set:ro", "/mps:/mps"]
    assert _option(args, "--device") == ["nvidia.com/gpu=3"]
    docker = run_arguments(_plan(engine="docker", gpus=(0, 1)))
    assert _option(docker, "--gpus") == ["device=0,1"]
    assert _option(docker, "--pull") == []  # docker run has no --pull never before 20.10: not asked


def test_without_cdi_every_node_a_cuda_process_opens_is_given() -> None:
    nodes = _option(gpu_arguments("podman", (1,), cdi=False), "--device")
    assert nodes == ["/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]


def test_a_container_name_is_at_most_250_characters() -> None:
    assert len(container_name("u" * 300, 0, "r", 0, 0)) == 250


def test_a_container_keeps_no_capability_and_no_way_to_gain_one() -> None:
    args = run_arguments(_plan())
    assert _option(args, "--cap-drop") == ["all"]
    assert _option(args, "--security-opt") == ["no-new-privileges"]
    assert "--cap-add" not in args
    assert "--privileged" not in args
    # The tenant's uid, never the image's root.
    assert _option(args, "--user") == ["1800000001:1800000001"]
