"""Job limits: every bound is checked at validation, named with its YAML path, its limit and the fix."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from libs.protocol import JobProtocolError, Problem, parse_job
from libs.protocol.limits import DEFAULT_LIMITS, MIN_TASK_MEMORY_MB, JobLimits
from tests.protocol.jobtexts import BASE_JOB, job, to_yaml


def problems_of(text: str, limits: JobLimits = DEFAULT_LIMITS) -> list[Problem]:
    with pytest.raises(JobProtocolError) as caught:
        parse_job(text, limits)
    return caught.value.problems


def worker(**changes: Any) -> dict[str, Any]:
    role: dict[str, Any] = copy.deepcopy(BASE_JOB["taskRoles"]["worker"])
    role.update(changes)
    return role


def resources(**changes: Any) -> dict[str, Any]:
    return worker(resourcePerInstance={"cpu": 1, "memoryMB": 512, "gpu": 0, **changes})


OVER_LIMITS = [
    pytest.param(
        job(taskRoles={"worker": worker(instances=1_000_000_000)}),
        "taskRoles.worker.instances",
        "10,000 instances per task role",
        id="a billion instances",
    ),
    pytest.param(
        job(taskRoles={"worker": worker(instances=10**30)}),
        "taskRoles.worker.instances",
        "10,000 instances per task role",
        id="10**30 instances",
    ),
    pytest.param(
        job(taskRoles={"a": worker(instances=6000), "b": worker(instances=6000)}),
        "taskRoles",
        "10,000 tasks per job",
        id="two roles over the job's task limit together",
    ),
    pytest.param(
        job(taskRoles={f"r{i}": worker(instances=1) for i in range(51)}),
        "taskRoles",
        "limit of 50",
        id="too many task roles",
    ),
    pytest.param(
        job(taskRoles={"worker": resources(memoryMB=1e18)}),
        "taskRoles.worker.resourcePerInstance.memoryMB",
        "MB of memory per task",
        id="memoryMB 1e18",
    ),
    pytest.param(
        job(taskRoles={"worker": resources(gpu=100_000)}),
        "taskRoles.worker.resourcePerInstance.gpu",
        "64 GPUs per task",
        id="gpu 100000",
    ),
    pytest.param(
        job(taskRoles={"worker": resources(cpu=10**30)}),
        "taskRoles.worker.resourcePerInstance.cpu",
        "1,024 CPUs per task",
        id="cpu 10**30",
    ),
    pytest.param(
        job(taskRoles={"worker": resources(ports={"x": 5000})}),
        "taskRoles.worker.resourcePerInstance.ports.x",
        "ports per task",
        id="too many ports",
    ),
    pytest.param(
        job(taskRoles={"worker": worker(extraContainerOptions={"shmMB": 10**12})}),
        "taskRoles.worker.extraContainerOptions.shmMB",
        "/dev/shm",
        id="huge shm",
    ),
    pytest.param(job(jobRetryCount=1e12), "jobRetryCount", "1,000 retries", id="jobRetryCount 1e12"),
    pytest.param(
        job(taskRoles={"worker": worker(taskRetryCount=10**6)}),
        "taskRoles.worker.taskRetryCount",
        "1,000 retries",
        id="taskRetryCount a million",
    ),
    pytest.param(
        job(extras={"tags": [f"t{i}" for i in range(101)]}), "extras.tags", "100 tags", id="too many tags"
    ),
    pytest.param(job(extras={"tags": ["x" * 300]}), "extras.tags[0]", "256", id="a tag too long"),
    pytest.param(job(description="d" * 70_000), "description", "65,536", id="a long description"),
    pytest.param(
        job(taskRoles={"worker": worker(commands=["echo " + "x" * 70_000])}),
        "taskRoles.worker.commands[0]",
        "65,536",
        id="a long command",
    ),
    pytest.param(job(parameters={"p": "v" * 70_000}), "parameters.p", "65,536", id="a long parameter"),
    pytest.param(job(secrets={"s": "v" * 70_000}), "secrets.s", "65,536", id="a long secret"),
    pytest.param(job(parameters={"big": 10**30}), "parameters.big", "2^53", id="a number beyond 2**53"),
]


@pytest.mark.parametrize(("document", "path", "limit"), OVER_LIMITS)
def test_a_job_over_a_limit_is_refused_naming_the_field_and_the_limit(
    document: dict[str, Any], path: str, limit: str
) -> None:
    problems = problems_of(json.dumps(document))
    matching = [p for p in problems if p.path == path]
    assert matching, problems
    assert limit in matching[0].message
    assert matching[0].hint, "a fix is always given"


def test_a_number_over_a_limit_is_told_once_with_that_limit() -> None:
    problems = problems_of(json.dumps(job(taskRoles={"worker": worker(instances=10**30)})))
    assert [p.path for p in problems] == ["taskRoles.worker.instances"]
    assert "PAI_LIMIT_INSTANCES_PER_TASK_ROLE" in problems[0].hint


def test_jobs_at_the_limits_are_valid() -> None:
    at_limits = job(
        jobRetryCount=1000,
        taskRoles={
            "a": worker(instances=5000, taskRetryCount=1000),
            "b": worker(instances=5000, resourcePerInstance={"cpu": 1024, "memoryMB": 16 * 2**20, "gpu": 64}),
        },
        extras={"tags": ["t" * 256] * 100},
    )
    assert parse_job(to_yaml(at_limits)).total_tasks == 10_000


def test_an_admin_can_lower_or_raise_the_limits() -> None:
    text = to_yaml(job(taskRoles={"worker": worker(instances=20)}))
    [problem] = problems_of(text, JobLimits(instances_per_task_role=10, tasks_per_job=10))
    assert "limit of 10 instances" in problem.message
    big = to_yaml(job(taskRoles={"worker": worker(instances=20_000)}))
    raised = JobLimits(instances_per_task_role=50_000, tasks_per_job=50_000)
    assert parse_job(big, raised).total_tasks == 20_000


def test_the_api_names_of_the_limits_are_camel_case() -> None:
    names = DEFAULT_LIMITS.as_api()
    assert names["tasksPerJob"] == 10_000
    assert names["memoryMBPerTask"] == 16 * 2**20
    assert set(names) >= {"instancesPerTaskRole", "gpuPerTask", "retryCount", "tagLength", "textLength"}


@pytest.mark.parametrize(
    "memory",
    [
        pytest.param(0, id="nothing"),
        pytest.param(1, id="one MB"),
        pytest.param(16, id="16 MB, once the benches' size"),
        pytest.param(MIN_TASK_MEMORY_MB - 1, id="one MB short"),
    ],
)
def test_a_task_with_less_memory_than_its_runtime_needs_is_refused_with_the_minimum(memory: int) -> None:
    problems = problems_of(json.dumps(job(taskRoles={"worker": resources(memoryMB=memory)})))
    assert [p.path for p in problems] == ["taskRoles.worker.resourcePerInstance.memoryMB"]  # told once
    [problem] = problems
    assert problem.message.startswith(
        f"{memory} MB is less than the {MIN_TASK_MEMORY_MB} MB every task needs"
    )
    assert problem.hint == f"ask for at least {MIN_TASK_MEMORY_MB}: `memoryMB: {MIN_TASK_MEMORY_MB}` or more"


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"memoryMB": MIN_TASK_MEMORY_MB}, id="the minimum of memory"),
        pytest.param({"cpu": 0}, id="cpu 0 reserves no CPU"),
    ],
)
def test_the_least_a_task_may_ask_for_is_accepted(changes: dict[str, int]) -> None:
    parsed = parse_job(json.dumps(job(taskRoles={"worker": resources(**changes)})))
    resources_asked = parsed.task_roles["worker"].resource_per_instance
    assert {"cpu": resources_asked.cpu, "memoryMB": resources_asked.memory_mb} == {
        "cpu": changes.get("cpu", 1),
        "memoryMB": changes.get("memoryMB", 512),
    }


def test_a_negative_cpu_is_refused() -> None:
    [problem] = problems_of(json.dumps(job(taskRoles={"worker": resources(cpu=-1)})))
    assert (problem.path, problem.hint) == ("taskRoles.worker.resourcePerInstance.cpu", "use 0 or more")
    assert problem.message.startswith("must be at least 0, not -1")


def test_texts_and_keys_at_their_limits_pass_and_one_character_more_is_refused() -> None:
    limits = JobLimits(name_length=64, text_length=100, task_roles_per_job=2)
    at = job(description="d" * 100, extras={"k" * 64: "v", "role": {"name": "n" * 64}})
    assert parse_job(to_yaml(at), limits).description == "d" * 100
    over = job(
        description="d" * 101,
        extras={"k" * 65: 1, "j" * 65: 2, "role": {"name": "n" * 65, "note": "n" * 65}},
    )
    problems = {p.path: p for p in problems_of(to_yaml(over), limits)}
    # Both long keys are told (each cut to 40 characters), and a `name` is held to the name limit.
    assert sorted(problems) == [
        "description",
        "extras." + "j" * 40 + "...",
        "extras." + "k" * 40 + "...",
        "extras.role.name",
    ]
    assert problems["description"].message.startswith(
        "is 101 characters long, more than the cluster's limit of 100 (line "
    )
    assert problems["description"].hint.endswith("PAI_LIMIT_TEXT_LENGTH")
    assert problems["extras.role.name"].hint.endswith("PAI_LIMIT_NAME_LENGTH")
    roles = {"a": worker(), "b": worker()}
    assert len(parse_job(to_yaml(job(taskRoles=roles)), limits).task_roles) == 2
    [problem] = problems_of(to_yaml(job(taskRoles={**roles, "c": worker()})), limits)
    assert problem.path == "taskRoles"
