"""The PAI_* environment of a three-role job, checked against OpenPAI's documented variables."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from runtime.environment import build_environment
from runtime.spec import TaskSpec, parse_spec
from runtime.ssh import ssh_config
from tests.runtime.helpers import role, spec_for

ROLES = [
    {**role("ps", 2, cpu=2, memory_mb=4096, ports={"grpc": 1}), "min_failed_instances": -1},
    role("worker", 3, cpu=4, memory_mb=8192, gpu=1, shm_mb=1024, ports={"grpc": 2}),
    {**role("chief", 1, cpu=0.5, memory_mb=1024, gpu=2), "min_succeeded_instances": 1},
]


def _ports() -> dict[tuple[str, int], dict[str, list[int]]]:
    ports: dict[tuple[str, int], dict[str, list[int]]] = {}
    base = 30000
    for r in ROLES:
        for i in range(r["instances"]):
            labels = {"ssh": 1, "http": 1, **r["resources"]["ports"]}
            ports[(r["name"], i)] = {}
            for label, count in labels.items():
                ports[(r["name"], i)][label] = list(range(base, base + count))
                base += count
    return ports


@pytest.fixture
def spec(tmp_path: Path) -> TaskSpec:
    raw = spec_for(tmp_path, "worker", 1, ROLES, "true", ports=_ports(), gpu_indices=[3])
    raw["job"]["virtual_cluster"] = "vc1"
    raw["tasks"] = [dict(t, host_ip=f"10.0.{n}.1") for n, t in enumerate(raw["tasks"])]
    return parse_spec(raw)


def test_job_level_variables_name_the_job_as_openpai_does(spec: TaskSpec) -> None:
    env = build_environment(spec)
    assert env["PAI_JOB_NAME"] == "alice~demo"
    assert env["PAI_FRAMEWORK_NAME"] == "alice~demo"
    assert env["PAI_USER_NAME"] == "alice"
    assert env["PAI_DEFAULT_FS_URI"] == ""
    assert env["PAI_VIRTUAL_CLUSTER"] == env["PAI_JOB_VC_NAME"] == "vc1"
    assert env["PAI_TASK_ROLE_COUNT"] == "3"
    assert env["PAI_TASK_ROLE_LIST"] == "ps,worker,chief"
    assert env["PAI_JOB_TASK_COUNT"] == "6"


@pytest.mark.parametrize(
    ("name", "count", "resource", "min_failed", "min_succeeded"),
    [
        pytest.param("ps", "2", "0,2,4096,512", "-1", "2", id="ps-keeps-minus-one"),
        pytest.param("worker", "3", "1,4,8192,1024", "1", "3", id="worker-defaults"),
        pytest.param("chief", "1", "2,0.5,1024,512", "1", "1", id="chief-explicit-succeeded"),
    ],
)
def test_role_level_variables_follow_the_documented_formats(
    spec: TaskSpec, name: str, count: str, resource: str, min_failed: str, min_succeeded: str
) -> None:
    env = build_environment(spec)
    assert env[f"PAI_TASK_ROLE_TASK_COUNT_{name}"] == count
    assert env[f"PAI_RESOURCE_{name}"] == resource
    assert env[f"PAI_MIN_FAILED_TASK_COUNT_{name}"] == min_failed
    assert env[f"PAI_MIN_SUCCEEDED_TASK_COUNT_{name}"] == min_succeeded


def test_every_task_is_reachable_by_host_ip_and_port_list(spec: TaskSpec) -> None:
    env = build_environment(spec)
    for task in spec.tasks:
        assert env[f"PAI_HOST_IP_{task.role}_{task.index}"] == task.host_ip
        for label, ports in task.ports.items():
            expected = ",".join(str(p) for p in ports)
            assert env[f"PAI_PORT_LIST_{task.role}_{task.index}_{label}"] == expected
            assert env[f"PAI_{task.role}_{task.index}_{label}_PORT"] == expected
    workers = [t for t in spec.tasks if t.role == "worker"]
    assert env["PAI_TASK_ROLE_worker_HOST_LIST"] == ",".join(
        f"{t.host_ip}:{t.ports['http'][0]}" for t in workers
    )
    assert env["PAI_TASK_ROLE_INSTANCES"] == "ps:0,ps:1,worker:0,worker:1,worker:2,chief:0"


def test_current_task_variables_describe_this_task_only(spec: TaskSpec) -> None:
    env = build_environment(spec)
    me = spec.placement("worker", 1)
    assert env["PAI_CURRENT_TASK_ROLE_NAME"] == "worker"
    assert env["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"] == env["PAI_TASK_INDEX"] == "1"
    assert env["PAI_CURRENT_CONTAINER_IP"] == me.host_ip
    assert env["PAI_CURRENT_CONTAINER_PORT"] == str(me.ports["http"][0])
    assert env["PAI_CONTAINER_SSH_PORT"] == str(me.ports["ssh"][0])
    grpc = me.ports["grpc"]
    assert env["PAI_CONTAINER_HOST_grpc_PORT_LIST"] == f"{grpc[0]},{grpc[1]}"
    assert env["PAI_CONTAINER_HOST_PORT_LIST"] == (
        f"ssh:{me.ports['ssh'][0]};http:{me.ports['http'][0]};grpc:{grpc[0]},{grpc[1]};"
    )
    assert env["CUDA_VISIBLE_DEVICES"] == "3"


def two_ssh_ports(tmp_path: Path) -> TaskSpec:
    """A task given two ssh ports (resourcePerInstance.ports.ssh: 2), as its peer is."""
    ports = {
        ("worker", i): {"ssh": [30010 + 3 * i, 30011 + 3 * i], "http": [30012 + 3 * i]} for i in range(2)
    }
    return parse_spec(
        spec_for(tmp_path, "worker", 0, [role("worker", 2, ports={"ssh": 2})], "true", ports=ports)
    )


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        pytest.param(
            lambda spec: build_environment(spec)["PAI_CONTAINER_SSH_PORT"],
            "30010",
            id="PAI_CONTAINER_SSH_PORT",
        ),
        pytest.param(
            lambda spec: [line for line in ssh_config(spec, Path("id"), "u").splitlines() if "Port" in line],
            ["  Port 30010", "  Port 30013"],
            id="the ssh config of every peer",
        ),
    ],
)
def test_a_task_with_several_ssh_ports_is_reached_on_the_first(
    tmp_path: Path, where: Callable[[TaskSpec], object], expected: object
) -> None:
    assert where(two_ssh_ports(tmp_path)) == expected


def test_no_secret_or_spec_path_leaks_into_the_environment(tmp_path: Path) -> None:
    raw = spec_for(tmp_path, "worker", 0, [role("worker")], "echo <% $secrets.x %>")
    raw["secrets_file"] = str(tmp_path / "secrets.json")
    env = build_environment(parse_spec(raw))
    assert not any("secrets" in v for v in env.values())
    assert all(k.startswith(("PAI_", "FC_", "CUDA_", "NVIDIA_")) for k in env)


def test_a_task_sharing_its_gpu_sees_that_gpu_and_its_share(spec: TaskSpec) -> None:
    shared = spec.replace(gpu_milli=500, gpu_memory_mib=8192)
    env = build_environment(shared)
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    assert env["PAI_GPU_SHARE_MILLI"] == "500"
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert env["PAI_GPU_MEMORY_MIB"] == "8192"
    assert "PAI_GPU_SHARE_MILLI" not in build_environment(spec)


def test_every_alias_of_a_job_level_variable_carries_the_same_value(tmp_path: Path) -> None:
    raw = spec_for(tmp_path, "worker", 1, ROLES, "true", ports=_ports())
    raw["job"] |= {"uid": "job-7", "attempt_id": 2, "task_attempt_id": 4}
    env = build_environment(parse_spec(raw))
    assert env["PAI_USERNAME"] == env["PAI_USER_NAME"] == "alice"
    assert env["PAI_JOB_UID"] == "job-7"
    assert env["PAI_JOB_ATTEMPT_ID"] == env["FC_FRAMEWORK_ATTEMPT_ID"] == "2"
    assert env["FC_TASK_ATTEMPT_ID"] == "4"
    assert env["FC_FRAMEWORK_NAME"] == "alice~demo"
    assert env["FC_TASKROLE_NAME"] == "worker"
    assert env["FC_TASK_INDEX"] == "1"
    assert env["PAI_JOB_TASK_ROLE_COUNT"] == env["PAI_TASK_ROLES_NUM"] == "3"
    assert env["PAI_JOB_TASK_ROLE_LIST"] == "ps,worker,chief"
    assert env["PAI_TASKS_NUM"] == "6"


def test_a_role_s_own_succeeded_count_is_kept_below_its_instances(tmp_path: Path) -> None:
    roles = [{**role("worker", 3), "min_succeeded_instances": 2}]
    env = build_environment(parse_spec(spec_for(tmp_path, "worker", 0, roles, "true")))
    assert env["PAI_MIN_SUCCEEDED_TASK_COUNT_worker"] == "2"


def test_this_task_s_http_port_and_gpus_have_every_documented_name(spec: TaskSpec) -> None:
    env = build_environment(spec.replace(gpu_indices=[3, 5]))
    http = str(spec.placement("worker", 1).ports["http"][0])
    assert env["PAI_CURRENT_CONTAINER_PORT"] == env["PAI_CONTAINER_HOST_PORT"] == http
    assert env["CUDA_VISIBLE_DEVICES"] == env["NVIDIA_VISIBLE_DEVICES"] == "3,5"
    assert "CUDA_MPS_PIPE_DIRECTORY" not in env


def test_a_task_without_gpus_hides_every_gpu_and_names_no_nvidia_devices(spec: TaskSpec) -> None:
    env = build_environment(spec.replace(gpu_indices=[], gpu_milli=500))
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert not any(name.startswith("NVIDIA_") or "GPU_SHARE" in name for name in env)


def test_a_gpu_share_on_a_node_running_mps_makes_the_task_its_client(spec: TaskSpec, tmp_path: Path) -> None:
    pipes = tmp_path / "mps"
    env = build_environment(spec.replace(gpu_milli=250, mps_pipe_dir=pipes))
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == str(pipes)
    assert "CUDA_MPS_PIPE_DIRECTORY" not in build_environment(spec.replace(mps_pipe_dir=pipes))
    assert "CUDA_MPS_PIPE_DIRECTORY" not in build_environment(spec.replace(gpu_milli=250))


@pytest.mark.parametrize(
    ("milli", "memory", "expected"),
    [
        pytest.param(
            500,
            8192,
            {
                "PAI_GPU_SHARE_MILLI": "500",
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
                "CUDA_DEVICE_SM_LIMIT": "50",
                "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.500",
                "TF_FORCE_GPU_ALLOW_GROWTH": "true",
                "PAI_GPU_MEMORY_MIB": "8192",
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=8192M",
                "CUDA_DEVICE_MEMORY_LIMIT": "8192m",
            },
            id="half-with-a-memory-cap",
        ),
        pytest.param(
            999,
            None,
            {
                "PAI_GPU_SHARE_MILLI": "999",
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100",
                "CUDA_DEVICE_SM_LIMIT": "100",
                "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.999",
                "TF_FORCE_GPU_ALLOW_GROWTH": "true",
            },
            id="nearly-all-no-cap",
        ),
        pytest.param(
            4,
            None,
            {
                "PAI_GPU_SHARE_MILLI": "4",
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "1",
                "CUDA_DEVICE_SM_LIMIT": "1",
                "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.004",
                "TF_FORCE_GPU_ALLOW_GROWTH": "true",
            },
            id="a-sliver-keeps-one-percent",
        ),
    ],
)
def test_a_gpu_share_is_told_to_cuda_mps_hami_and_the_frameworks(
    spec: TaskSpec, milli: int, memory: int | None, expected: dict[str, str]
) -> None:
    env = build_environment(spec.replace(gpu_milli=milli, gpu_memory_mib=memory))
    assert {name: env[name] for name in env if name not in build_environment(spec)} == expected
