"""extras.gpuShare: a role asks for a fraction of one GPU; mistakes name the field and the allowed values."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from libs.protocol import JobProtocolError, parse_job
from libs.protocol.gpu_share import GpuShare
from tests.protocol.jobtexts import BASE_JOB, to_yaml


def shared_job(share: Any, gpu: Any = 1, role: str = "worker") -> dict[str, Any]:
    data: dict[str, Any] = copy.deepcopy(BASE_JOB)
    data["taskRoles"]["worker"]["resourcePerInstance"]["gpu"] = gpu
    data["extras"] = {"gpuShare": {"taskRoles": {role: share}}}
    return data


def test_a_half_gpu_with_a_memory_cap_is_read() -> None:
    job = parse_job(to_yaml(shared_job({"gpuMilli": 500, "gpuMemoryMiB": 8192})))
    assert job.gpu_shares == {"worker": GpuShare(500, 8192)}
    assert job.gpu_shares["worker"].percentage == 50


def test_a_job_without_the_extension_shares_nothing() -> None:
    assert parse_job(to_yaml(BASE_JOB)).gpu_shares == {}


@pytest.mark.parametrize(
    ("data", "path", "allowed"),
    [
        pytest.param(
            shared_job({"gpuMilli": 1000}),
            "extras.gpuShare.taskRoles.worker.gpuMilli",
            "1 to 999",
            id="whole gpu",
        ),
        pytest.param(
            shared_job({"gpuMilli": 0.5}),
            "extras.gpuShare.taskRoles.worker.gpuMilli",
            "1 to 999",
            id="fraction",
        ),
        pytest.param(shared_job({}), "extras.gpuShare.taskRoles.worker.gpuMilli", "1 to 999", id="missing"),
        pytest.param(
            shared_job({"gpuMilli": 500, "gpuMemoryMiB": -1}),
            "extras.gpuShare.taskRoles.worker.gpuMemoryMiB",
            "whole number from 1",
            id="negative memory",
        ),
        pytest.param(
            shared_job({"gpuMilli": 500, "cores": 2}),
            "extras.gpuShare.taskRoles.worker.cores",
            "gpuMilli, gpuMemoryMiB",
            id="unknown field",
        ),
        pytest.param(
            shared_job({"gpuMilli": 500}, gpu=2),
            "taskRoles.worker.resourcePerInstance.gpu",
            "gpu: 1",
            id="two gpus",
        ),
        pytest.param(
            shared_job({"gpuMilli": 500}, role="ps"),
            "extras.gpuShare.taskRoles.ps",
            "worker",
            id="no such role",
        ),
        pytest.param(
            shared_job({"gpuMilli": 500}) | {"extras": {"gpuShare": [1]}},
            "extras.gpuShare",
            "mapping",
            id="list",
        ),
    ],
)
def test_a_bad_share_names_the_field_and_what_is_allowed(
    data: dict[str, Any], path: str, allowed: str
) -> None:
    with pytest.raises(JobProtocolError) as caught:
        parse_job(to_yaml(data))
    found = [p for p in caught.value.problems if p.path == path]
    assert found, [p.path for p in caught.value.problems]
    assert allowed in found[0].message + found[0].hint
