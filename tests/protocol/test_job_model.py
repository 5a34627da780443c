"""What a job that passed says about itself, as the scheduler, the runtime and the API read it:
totals, virtual cluster, priority, gang allocation, shared memory, the defaults OpenPAI fills in,
numbers read as JavaScript reads them, nulls refused where a value is typed."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import Field, ValidationError

from libs.protocol import JobConfig, JobProtocolError, parse_job
from libs.protocol.gpu_share import GpuShare
from libs.protocol.jobs import ProtocolModel
from tests.protocol.jobtexts import BASE_JOB, to_yaml


def parsed(**changes: Any) -> JobConfig:
    data: dict[str, Any] = copy.deepcopy(BASE_JOB)
    data.update(changes)
    return parse_job(to_yaml(data))


def roles(**extra: dict[str, Any]) -> dict[str, Any]:
    worker = copy.deepcopy(BASE_JOB["taskRoles"]["worker"])
    found = {"worker": worker}
    for name, changes in extra.items():
        found[name] = {**copy.deepcopy(worker), **changes}
    return found


def test_totals_count_tasks_roles_and_gpus() -> None:
    job = parsed(
        taskRoles=roles(
            ps={"instances": 3, "resourcePerInstance": {"cpu": 1, "memoryMB": 512, "gpu": 0}},
            chief={"instances": 1, "resourcePerInstance": {"cpu": 1, "memoryMB": 512, "gpu": 4}},
        )
    )
    assert (job.total_tasks, job.total_task_roles, job.total_gpus) == (2 + 3 + 1, 3, 2 * 1 + 0 + 4)


def test_the_virtual_cluster_is_default_unless_named() -> None:
    assert parsed().virtual_cluster == "default"
    assert parsed(defaults={"virtualCluster": "vc2"}).virtual_cluster == "vc2"
    assert parsed(defaults={"virtualCluster": ""}).virtual_cluster == "default"


@pytest.mark.parametrize(("name", "number"), [("crit", 120), ("prod", 100), ("test", 10), ("oppo", -1)])
def test_a_priority_class_has_hiveds_number(name: str, number: int) -> None:
    job = parsed(extras={"hivedScheduler": {"jobPriorityClass": name}})
    assert (job.priority_class, job.priority) == (name, number)


def test_no_priority_class_is_no_priority() -> None:
    assert (parsed().priority_class, parsed().priority) == (None, None)
    job = parsed(extras={"hivedScheduler": {}})
    assert (job.priority_class, job.priority) == (None, None)
    assert parsed(extras={"submitFrom": "x"}).priority is None


def test_tasks_start_together_unless_the_job_says_false() -> None:
    assert parsed().gang_allocation is True
    assert parsed(extras={}).gang_allocation is True
    assert parsed(extras={"gangAllocation": True}).gang_allocation is True
    assert parsed(extras={"gangAllocation": False}).gang_allocation is False


def test_gpu_shares_are_read_from_the_extras() -> None:
    assert parsed().gpu_shares == {}
    job = parsed(extras={"gpuShare": {"taskRoles": {"worker": {"gpuMilli": 250}}}})
    assert job.gpu_shares == {"worker": GpuShare(250)}


def test_shared_memory_is_512_mb_unless_the_role_asks() -> None:
    assert parsed().task_roles["worker"].shm_mb == 512
    asked = roles()
    asked["worker"]["extraContainerOptions"] = {"shmMB": 2048}
    assert parsed(taskRoles=asked).task_roles["worker"].shm_mb == 2048
    other = roles()
    other["worker"]["extraContainerOptions"] = {"infiniband": True}
    assert parsed(taskRoles=other).task_roles["worker"].shm_mb == 512


def test_openpai_defaults_are_filled_in() -> None:
    role = parsed().task_roles["worker"]
    assert (role.completion.min_failed_instances, role.completion.min_succeeded_instances) == (1, 2)
    assert role.resource_per_instance.ports == {"ssh": 1, "http": 1}
    given = roles()
    given["worker"]["completion"] = {"minFailedInstances": -1, "minSucceededInstances": 0}
    given["worker"]["resourcePerInstance"]["ports"] = {"ssh": 2, "tb": 1}
    role = parsed(taskRoles=given).task_roles["worker"]
    assert (role.completion.min_failed_instances, role.completion.min_succeeded_instances) == (-1, 2)
    assert role.resource_per_instance.ports == {"ssh": 2, "tb": 1, "http": 1}


def test_a_prerequisite_is_found_by_type_and_name() -> None:
    job = parsed()
    image = job.prerequisite("dockerimage", "image")
    assert image is not None
    assert image.uri == "pytorch/pytorch:2.0"
    assert job.prerequisite("data", "image") is None
    assert job.prerequisite("dockerimage", None) is None
    data: dict[str, Any] = copy.deepcopy(BASE_JOB)
    del data["prerequisites"]
    assert JobConfig.model_validate(data).prerequisite("dockerimage", "image") is None


def test_the_deployment_is_the_one_the_defaults_name() -> None:
    deployments = [
        {"name": "a", "taskRoles": {"worker": {"preCommands": ["echo a"]}}},
        {"name": "b", "taskRoles": {"worker": {"preCommands": ["echo b"]}}},
    ]
    job = parsed(deployments=deployments, defaults={"deployment": "b"})
    chosen = job.deployment()
    assert chosen is not None
    assert chosen.name == "b"
    assert parsed(deployments=deployments).deployment() is None
    assert parsed().deployment() is None


@pytest.mark.parametrize(("value", "count"), [(2, 2), (2.0, 2), (1e2, 100)])
def test_a_whole_number_is_read_whatever_its_notation(value: float, count: int) -> None:
    changed = roles()
    changed["worker"]["instances"] = value
    assert parsed(taskRoles=changed).task_roles["worker"].instances == count


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "must be a whole number of instances, e.g. 1, not a boolean"),
        (1.5, "must be a whole number of instances, e.g. 1, not 1.5"),
        ("2", "must be a whole number of instances, e.g. 1, not text"),
        (float("inf"), "must be a whole number of instances, e.g. 1, not inf"),
    ],
)
def test_anything_else_is_not_a_count(value: Any, message: str) -> None:
    changed = roles()
    changed["worker"]["instances"] = value
    with pytest.raises(JobProtocolError) as caught:
        parsed(taskRoles=changed)
    first = caught.value.problems[0]
    assert (first.path, first.message.split(" (line")[0]) == ("taskRoles.worker.instances", message)


@pytest.mark.parametrize(("value", "kept"), [("1.0", "1.0"), (2, 2), (2.5, 2.5)])
def test_a_version_is_text_or_a_number(value: Any, kept: Any) -> None:
    assert parsed(version=value).version == kept


@pytest.mark.parametrize("value", [True, [1], {"a": 1}])
def test_a_version_of_another_kind_is_refused(value: Any) -> None:
    with pytest.raises(JobProtocolError) as caught:
        parsed(version=value)
    assert caught.value.problems[0].path == "version"
    assert caught.value.problems[0].message.startswith("must be text or a number, not ")


def test_null_is_refused_where_a_value_is_typed_and_kept_where_a_plugin_reads_it() -> None:
    with pytest.raises(JobProtocolError) as caught:
        parse_job(to_yaml(BASE_JOB) + "contributor: null\n")
    assert [p.path for p in caught.value.problems] == ["contributor"]
    job = parsed(extras={"hivedScheduler": None, "myPlugin": {"setting": None}, "gangAllocation": None})
    assert job.extras is not None
    assert job.extras.model_extra == {"myPlugin": {"setting": None}}
    assert job.gang_allocation is True


def test_a_section_refuses_null_in_its_typed_fields_and_takes_it_in_its_nullable_ones() -> None:
    # A section model made here, so that which of its keys are typed is worked out in this test.
    class Section(ProtocolModel):
        nullable = frozenset({"maybe"})
        count: int | None = Field(None, alias="countOf")
        maybe: int | None = None

    assert Section.model_validate({"maybe": None}).maybe is None
    for key in ("countOf", "count"):
        with pytest.raises(ValidationError) as caught:
            Section.model_validate({key: None})
        assert caught.value.errors()[0]["loc"] == (key,)
    assert Section.model_validate({"countOf": 3}).count == 3
