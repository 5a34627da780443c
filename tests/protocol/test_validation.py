"""Job validation: every problem at once, each with its YAML path, what is wrong and a fix."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from libs.protocol import JobConfig, JobProtocolError, Problem, parse_job
from tests.protocol.jobtexts import BASE_JOB, job, to_yaml


def problems_of(text: str) -> list[Problem]:
    with pytest.raises(JobProtocolError) as caught:
        parse_job(text)
    return caught.value.problems


def worker(**changes: Any) -> dict[str, Any]:
    role: dict[str, Any] = copy.deepcopy(BASE_JOB["taskRoles"]["worker"])
    role.update(changes)
    return role


BAD_JOBS = [
    pytest.param(job(protocolVersion=3), "protocolVersion", id="protocol version other than 2"),
    pytest.param(job(name="my job!"), "name", id="name with spaces and punctuation"),
    pytest.param(job(name="x" * 256), "name", id="name longer than 255 characters"),
    pytest.param(job(type="service"), "type", id="type other than job"),
    pytest.param(job(taskRoles=None), "taskRoles", id="no task roles"),
    pytest.param(job(taskRoles={}), "taskRoles", id="empty task roles"),
    pytest.param(job(taskRoles={"bad-role": worker()}), "taskRoles.bad-role", id="task role key with a dash"),
    pytest.param(
        job(taskRoles={"worker": worker(resourcePerInstance={"cpu": 1, "memoryMB": 512, "gpu": "two"})}),
        "taskRoles.worker.resourcePerInstance.gpu",
        id="gpu given as text",
    ),
    pytest.param(
        job(taskRoles={"worker": worker(resourcePerInstance={"cpu": 1, "memoryMB": 512, "gpu": True})}),
        "taskRoles.worker.resourcePerInstance.gpu",
        id="gpu given as a boolean",
    ),
    pytest.param(
        job(taskRoles={"worker": worker(resourcePerInstance={"cpu": 1, "gpu": 0})}),
        "taskRoles.worker.resourcePerInstance.memoryMB",
        id="memory missing",
    ),
    pytest.param(
        job(taskRoles={"worker": worker(instances=0)}), "taskRoles.worker.instances", id="zero instances"
    ),
    pytest.param(
        job(taskRoles={"worker": worker(commands=[])}), "taskRoles.worker.commands", id="no commands"
    ),
    pytest.param(
        job(taskRoles={"worker": worker(commands=None)}), "taskRoles.worker.commands", id="null commands"
    ),
    pytest.param(
        job(taskRoles={"worker": worker(gpus=1)}), "taskRoles.worker.gpus", id="unknown task role field"
    ),
    pytest.param(
        job(taskRoles={"worker": worker(completion={"minFailedInstances": -2})}),
        "taskRoles.worker.completion.minFailedInstances",
        id="completion threshold below -1",
    ),
    pytest.param(
        job(taskRoles={"worker": worker(dockerImage="missing")}),
        "taskRoles.worker.dockerImage",
        id="docker image not among prerequisites",
    ),
    pytest.param(
        job(taskRoles={"worker": worker(data="image")}),
        "taskRoles.worker.data",
        id="data naming a dockerimage prerequisite",
    ),
    pytest.param(
        job(taskRoles={"worker": worker(prerequisites=["nothing"])}),
        "taskRoles.worker.prerequisites[0]",
        id="task role prerequisite list naming nothing",
    ),
    pytest.param(
        job(prerequisites=[*BASE_JOB["prerequisites"], {"name": "image", "type": "dockerimage", "uri": "x"}]),
        "prerequisites[2].name",
        id="duplicate prerequisite",
    ),
    pytest.param(
        job(prerequisites=[{"name": "image", "type": "container", "uri": "x"}]),
        "prerequisites[0]",
        id="prerequisite of unknown type",
    ),
    pytest.param(
        job(prerequisites=[{"name": "image", "type": "dockerimage"}]),
        "prerequisites[0].uri",
        id="docker image without uri",
    ),
    pytest.param(
        job(defaults={"deployment": "prod"}), "defaults.deployment", id="default deployment missing"
    ),
    pytest.param(
        job(
            deployments=[
                {"name": "a", "taskRoles": {"worker": {}}},
                {"name": "a", "taskRoles": {"worker": {}}},
            ]
        ),
        "deployments[1].name",
        id="duplicate deployment",
    ),
    pytest.param(job(jobRetryCount=-1), "jobRetryCount", id="negative job retry count"),
    pytest.param(job(parameters=["a"]), "parameters", id="parameters as a list"),
    pytest.param(
        job(extras={"hivedScheduler": {"jobPriorityClass": "urgent"}}),
        "extras.hivedScheduler.jobPriorityClass",
        id="unknown priority class",
    ),
    pytest.param(
        job(extras={"hivedScheduler": {"taskRoles": {"ps": {"skuType": "K80"}}}}),
        "extras.hivedScheduler.taskRoles.ps",
        id="hived settings for a missing task role",
    ),
    pytest.param(
        job(extras={"gangAllocation": "yes"}), "extras.gangAllocation", id="gang allocation as text"
    ),
    pytest.param(
        job(taskRoles={"worker": worker(commands=["echo <% $parameters.x"])}),
        "taskRoles.worker.commands",
        id="unclosed template tag",
    ),
]


@pytest.mark.parametrize(("data", "path"), BAD_JOBS)
def test_a_bad_job_is_refused_with_the_path_of_its_problem(data: dict[str, Any], path: str) -> None:
    problems = problems_of(to_yaml(data))
    assert path in [p.path for p in problems], problems
    for problem in problems:
        assert problem.message
        assert problem.hint


def test_every_problem_is_reported_at_once_in_yaml_order() -> None:
    text = to_yaml(
        job(
            name="bad name",
            taskRoles={
                "worker": worker(
                    dockerImage="nowhere",
                    resourcePerInstance={"cpu": "4", "memoryMB": 1024, "gpu": -1},
                )
            },
        )
    )
    paths = [p.path for p in problems_of(text)]
    assert paths == [
        "name",
        "taskRoles.worker.dockerImage",
        "taskRoles.worker.resourcePerInstance.cpu",
        "taskRoles.worker.resourcePerInstance.gpu",
    ]


def test_a_problem_names_its_line_and_how_to_fix_it() -> None:
    text = to_yaml(
        job(taskRoles={"worker": worker(resourcePerInstance={"cpu": 1, "memoryMB": 512, "gpu": "one"})})
    )
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "gpu: one" in row)
    (problem,) = problems_of(text)
    assert problem.path == "taskRoles.worker.resourcePerInstance.gpu"
    assert problem.message == f"must be a whole number of GPUs, e.g. 1, not text (line {line})"
    assert "number" in problem.hint


def test_a_misspelt_field_gets_a_suggestion() -> None:
    (problem,) = problems_of(to_yaml(job(taskRoles={"worker": worker(dockerimage="image")})))
    assert problem.path == "taskRoles.worker.dockerimage"
    assert "dockerImage" in problem.hint


@pytest.mark.parametrize(
    ("text", "line"),
    [
        pytest.param("name: [unclosed\ntype: job\n", 2, id="unclosed flow list"),
        pytest.param("name: a\n  type: job\n", 2, id="bad indentation"),
        pytest.param("name: a\nname: b\n", 2, id="duplicated key"),
        pytest.param("name: a\n---\nname: b\n", 2, id="two documents"),
    ],
)
def test_malformed_yaml_reports_its_line(text: str, line: int) -> None:
    (problem,) = problems_of(text)
    assert f"line {line}," in problem.message


@pytest.mark.parametrize("text", ["just text", "- a\n- b\n", "42"], ids=["scalar", "list", "number"])
def test_a_document_that_is_not_a_mapping_is_refused(text: str) -> None:
    (problem,) = problems_of(text)
    assert "mapping" in problem.message


def test_yes_and_no_are_text_as_in_openpai_so_a_flag_written_yes_is_refused() -> None:
    text = to_yaml(job(extras={"gangAllocation": False})).replace(
        "gangAllocation: false", "gangAllocation: no"
    )
    (problem,) = problems_of(text)
    assert problem.path == "extras.gangAllocation"
    assert "true or false" in problem.hint


def test_openpai_defaults_are_filled_in() -> None:
    bare = worker()
    del bare["instances"]
    parsed = parse_job(to_yaml(job(taskRoles={"worker": bare, "ps": worker(instances=3)})))
    role = parsed.task_roles["worker"]
    assert role.instances == 1
    assert role.completion.min_failed_instances == 1
    assert role.completion.min_succeeded_instances == 1
    assert parsed.task_roles["ps"].completion.min_succeeded_instances == 3
    assert role.resource_per_instance.ports == {"ssh": 1, "http": 1}
    assert role.task_retry_count == 0
    assert parsed.job_retry_count == 0
    assert role.shm_mb == 512
    assert parsed.virtual_cluster == "default"
    assert parsed.gang_allocation is True
    assert parsed.priority_class is None
    assert parsed.priority is None


def test_null_thresholds_take_the_default_and_minus_one_is_kept() -> None:
    completion = {"minFailedInstances": None, "minSucceededInstances": -1}
    parsed = parse_job(to_yaml(job(taskRoles={"worker": worker(completion=completion)})))
    assert parsed.task_roles["worker"].completion.min_failed_instances == 1
    assert parsed.task_roles["worker"].completion.min_succeeded_instances == -1


def test_ports_the_job_names_are_kept_beside_the_default_ones() -> None:
    resources = {"cpu": 1, "memoryMB": 512, "gpu": 0, "ports": {"tensorboard": 2, "ssh": 3}}
    parsed = parse_job(to_yaml(job(taskRoles={"worker": worker(resourcePerInstance=resources)})))
    assert parsed.task_roles["worker"].resource_per_instance.ports == {"tensorboard": 2, "ssh": 3, "http": 1}


def test_job_totals_and_scheduling_helpers() -> None:
    extras = {
        "gangAllocation": False,
        "hivedScheduler": {
            "jobPriorityClass": "prod",
            "taskRoles": {"worker": {"skuType": "V100", "skuNumber": 2, "affinityGroupName": "g"}},
        },
        "my.plugin.setting": {"kept": True},
    }
    data = job(
        extras=extras,
        defaults={"virtualCluster": "research"},
        taskRoles={
            "worker": worker(instances=3),
            "ps": worker(instances=1, resourcePerInstance={"cpu": 1, "memoryMB": 512, "gpu": 0}),
        },
    )
    parsed = parse_job(to_yaml(data))
    assert (parsed.total_tasks, parsed.total_gpus, parsed.total_task_roles) == (4, 3, 2)
    assert parsed.virtual_cluster == "research"
    assert parsed.gang_allocation is False
    assert (parsed.priority_class, parsed.priority) == ("prod", 100)
    assert parsed.extras is not None
    assert parsed.extras.hived_scheduler is not None
    hived_role = parsed.extras.hived_scheduler.task_roles["worker"]  # type: ignore[index]
    assert (hived_role.sku_type, hived_role.sku_num) == ("V100", 2)
    dumped = parsed.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert dumped["extras"]["my.plugin.setting"] == {"kept": True}
    assert dumped["extras"]["hivedScheduler"]["taskRoles"]["worker"]["skuNum"] == 2
    assert dumped["taskRoles"]["worker"]["resourcePerInstance"]["memoryMB"] == 8192


def test_a_dumped_job_parses_back_to_the_same_job() -> None:
    parsed = parse_job(to_yaml(job(parameters={"lr": 0.1}, secrets={"token": "abc"})))
    again = parse_job(to_yaml(parsed.model_dump(mode="json", by_alias=True, exclude_none=True)))
    assert again == parsed
    assert isinstance(again, JobConfig)


def test_whole_valued_numbers_count_as_integers_as_in_javascript() -> None:
    resources = {"cpu": 2.0, "memoryMB": 1024, "gpu": 1.0}
    parsed = parse_job(to_yaml(job(taskRoles={"worker": worker(resourcePerInstance=resources)})))
    assert parsed.task_roles["worker"].resource_per_instance.cpu == 2
    resources["cpu"] = 2.5
    (problem,) = problems_of(to_yaml(job(taskRoles={"worker": worker(resourcePerInstance=resources)})))
    assert problem.path == "taskRoles.worker.resourcePerInstance.cpu"


def test_parse_job_refuses_what_is_not_text() -> None:
    with pytest.raises(JobProtocolError):
        parse_job(b"name: x")  # type: ignore[arg-type]


def test_extras_accept_nulls_as_openpai_does_but_typed_fields_elsewhere_do_not() -> None:
    extras = {
        "gangAllocation": None,
        "custom.setting": None,
        "com.microsoft.pai.runtimeplugin": [{"plugin": "ssh", "parameters": None}],
        "hivedScheduler": {"taskRoles": {"worker": {"skuType": None, "skuNum": 1}}},
    }
    parsed = parse_job(to_yaml(job(extras=extras)))
    assert parsed.gang_allocation is True
    dumped = parsed.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert dumped["extras"]["hivedScheduler"] == {"taskRoles": {"worker": {"skuNum": 1}}}
    (problem,) = problems_of(to_yaml(job(jobRetryCount=0)).replace("jobRetryCount: 0", "jobRetryCount: null"))
    assert problem.path == "jobRetryCount"
    assert problem.message.startswith("must not be null")


def test_a_fraction_of_a_gpu_is_refused_as_not_a_whole_number_of_gpus() -> None:
    text = to_yaml(
        job(taskRoles={"worker": worker(resourcePerInstance={"cpu": 1, "memoryMB": 512, "gpu": 0.5})})
    )
    (problem,) = problems_of(text)
    assert problem.path == "taskRoles.worker.resourcePerInstance.gpu"
    assert problem.message.startswith("must be a whole number of GPUs, e.g. 1, not 0.5")
    assert problem.hint == "write a whole number such as 1"


def test_a_name_with_a_letter_outside_ascii_asks_for_ascii_letters() -> None:
    (problem,) = problems_of(to_yaml(job(name="jöb")))
    assert problem.path == "name"
    assert "'jöb' is not a valid name" in problem.message
    assert "ASCII letters" in problem.hint


def test_a_role_name_outside_ascii_asks_for_ascii_letters() -> None:
    (problem, *_) = problems_of(to_yaml(job(taskRoles={"wörker": worker()})))
    assert "ASCII letter" in problem.hint


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"], ids=["empty", "blank", "comment"])
def test_an_empty_document_is_called_empty(text: str) -> None:
    (problem,) = problems_of(text)
    assert problem.message.startswith("the document is empty")
