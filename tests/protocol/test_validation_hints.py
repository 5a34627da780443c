"""Each kind of mistake in a job's fields as its submitter reads it: the path, the whole message
and the whole fix (a required field, a field the protocol lacks, a bad name, null, the wrong type,
a number too small, an empty list or name, a value not among those allowed, a prerequisite type)."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from libs.protocol import JobProtocolError, parse_job
from tests.protocol.jobtexts import BASE_JOB, job, to_yaml

LINE = re.compile(r" \(line \d+\)$")
ROLE_NAME_FIX = (
    "task role and port names must start with an ASCII letter (a-z, A-Z) or '_' and hold only ASCII "
    "letters, digits and '_'"
)
NAME_FIX = "add a name made of letters, digits, '_' and '-'"
TYPE_FIX = "set `type` to dockerimage, script, output or data"


def problems(text: str) -> list[tuple[str, str, str]]:
    try:
        parse_job(text)
    except JobProtocolError as exc:
        return [(p.path, LINE.sub("", p.message), p.hint) for p in exc.problems]
    return []


def worker(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE_JOB)
    role = data["taskRoles"]["worker"]
    for key, value in changes.items():
        if value is None:
            del role[key]
        else:
            role[key] = value
    return data


def resources(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE_JOB)
    data["taskRoles"]["worker"]["resourcePerInstance"].update(changes)
    return data


@pytest.mark.parametrize(
    ("data", "path", "fix"),
    [
        (job(name=None), "name", NAME_FIX),
        (job(protocolVersion=None), "protocolVersion", "add `protocolVersion: 2`"),
        (job(taskRoles=None), "taskRoles", "add `taskRoles:` with at least one task role"),
        (
            job(type=None),
            "type",
            "add `type: job` (or the prerequisite's type: dockerimage, script, output or data)",
        ),
        (
            worker(commands=None),
            "taskRoles.worker.commands",
            "add `commands:` with the shell commands to run",
        ),
        (
            worker(dockerImage=None),
            "taskRoles.worker.dockerImage",
            "name the dockerimage prerequisite this task role runs in",
        ),
        (
            worker(resourcePerInstance=None),
            "taskRoles.worker.resourcePerInstance",
            "add `resourcePerInstance:` with cpu, memoryMB and gpu",
        ),
        (
            worker(resourcePerInstance={"memoryMB": 100, "gpu": 0}),
            "taskRoles.worker.resourcePerInstance.cpu",
            "add the number of CPU cores each instance needs",
        ),
        (
            worker(resourcePerInstance={"cpu": 1, "gpu": 0}),
            "taskRoles.worker.resourcePerInstance.memoryMB",
            "add the memory each instance needs, in MB",
        ),
        (
            worker(resourcePerInstance={"cpu": 1, "memoryMB": 100}),
            "taskRoles.worker.resourcePerInstance.gpu",
            "add the number of GPUs each instance needs (0 for none)",
        ),
        (
            job(prerequisites=[{"name": "image", "type": "dockerimage"}, BASE_JOB["prerequisites"][1]]),
            "prerequisites[0].uri",
            "add the uri: an image such as `ubuntu:22.04` for a dockerimage, a list of URLs for data",
        ),
        (
            job(extras={"com.microsoft.pai.runtimeplugin": [{"parameters": {}}]}),
            "extras.com.microsoft.pai.runtimeplugin[0].plugin",
            "name the runtime plugin, for example `ssh`",
        ),
        (job(extras={"storages": [{"mountPath": "/x"}]}), "extras.storages[0].name", NAME_FIX),
        (
            job(deployments=[{"name": "d"}]),
            "deployments[0].taskRoles",
            "add `taskRoles:` with at least one task role",
        ),
        (
            job(extras={"jobStatusChangeNotification": {}, "hivedScheduler": {}, "storages": [{}]}),
            "extras.storages[0].name",
            NAME_FIX,
        ),
    ],
)
def test_a_required_field_missing_says_what_to_add(data: dict[str, Any], path: str, fix: str) -> None:
    assert problems(to_yaml(data)) == [(path, "is required", fix)]


def test_a_prerequisite_or_deployment_without_a_name_says_how_to_name_it() -> None:
    data = job(prerequisites=[*BASE_JOB["prerequisites"], {"type": "script", "uri": "s"}])
    assert problems(to_yaml(data)) == [("prerequisites[2].name", "is required", NAME_FIX)]
    data = job(
        extras={"hivedScheduler": {"taskRoles": {"worker": {"skuNum": 1}}}},
        deployments=[{"taskRoles": {"worker": {}}}],
    )
    assert problems(to_yaml(data)) == [("deployments[0].name", "is required", NAME_FIX)]


@pytest.mark.parametrize(
    ("key", "fix"),
    [
        ("jobRetryCont", "did you mean `jobRetryCount`?"),
        ("descripton", "did you mean `description`?"),
        ("zzzqqq", "remove it; the protocol has no such field here"),
    ],
)
def test_a_field_the_protocol_lacks_is_named_with_the_closest_or_removed(key: str, fix: str) -> None:
    assert problems(to_yaml(job(**{key: 1}))) == [(key, "is not a field of the job protocol here", fix)]


def test_a_task_role_or_port_named_outside_the_grammar_says_the_grammar() -> None:
    data = job(taskRoles={"1worker": BASE_JOB["taskRoles"]["worker"]})
    assert problems(to_yaml(data)) == [("taskRoles.1worker", "'1worker' is not a valid name", ROLE_NAME_FIX)]
    data = resources(ports={"my-port": 1})
    assert problems(to_yaml(data)) == [
        ("taskRoles.worker.resourcePerInstance.ports.my-port", "'my-port' is not a valid name", ROLE_NAME_FIX)
    ]


def test_a_job_named_outside_the_grammar_says_which_characters() -> None:
    assert problems(to_yaml(job(name="a b"))) == [
        ("name", "'a b' is not a valid name", "use only ASCII letters (a-z, A-Z), digits, '_' and '-'")
    ]


def test_null_where_a_value_is_needed_says_give_one_or_remove_it() -> None:
    text = to_yaml(job()) + "jobRetryCount: null\n"
    assert problems(text) == [("jobRetryCount", "must not be null", "give a value or remove the line")]
    text = to_yaml(job()) + "description: ~\n"
    assert problems(text) == [("description", "must not be null", "give a value or remove the line")]


@pytest.mark.parametrize(
    ("changes", "path", "message", "fix"),
    [
        (
            {"description": [1]},
            "description",
            "must be text, not a list",
            "write text; quote it if it starts with {, [, * or &, or looks like a number",
        ),
        (
            {"jobRetryCount": 1.5},
            "jobRetryCount",
            "must be a whole number, e.g. 1, not 1.5",
            "write a whole number such as 1",
        ),
        (
            {"version": [1]},
            "version",
            "must be text or a number, not a list",
            "write for example `1.0` or `latest`",
        ),
        (
            {"extras": {"gangAllocation": "yes"}},
            "extras.gangAllocation",
            "must be true or false, not text",
            "write true or false",
        ),
        (
            {"defaults": "x"},
            "defaults",
            "must be a mapping of keys to values, not text",
            "write `key: value` lines",
        ),
        (
            {"parameters": [1]},
            "parameters",
            "must be a mapping of keys to values, not a list",
            "write `key: value` lines",
        ),
        (
            {"extras": [1]},
            "extras",
            "must be a mapping of keys to values, not a list",
            "write `key: value` lines",
        ),
        (
            {"taskRoles": {"worker": 3}},
            "taskRoles.worker",
            "must be a mapping of keys to values, not a number",
            "write `key: value` lines",
        ),
        (
            {"deployments": {"name": "d"}},
            "deployments",
            "must be a list, not a mapping",
            "write one `- item` line per entry",
        ),
    ],
)
def test_a_value_of_the_wrong_kind_says_the_kind_wanted(
    changes: dict[str, Any], path: str, message: str, fix: str
) -> None:
    assert problems(to_yaml(job(**changes))) == [(path, message, fix)]


@pytest.mark.parametrize(
    ("data", "path", "message", "fix"),
    [
        (worker(instances=0), "taskRoles.worker.instances", "must be at least 1, not 0", "use 1 or more"),
        (
            resources(cpu=-1),
            "taskRoles.worker.resourcePerInstance.cpu",
            "must be at least 0, not -1",
            "use 0 or more",
        ),
        (job(jobRetryCount=-3), "jobRetryCount", "must be at least 0, not -3", "use 0 or more"),
        (
            worker(completion={"minFailedInstances": -2}),
            "taskRoles.worker.completion.minFailedInstances",
            "must be at least -1, not -2",
            "use -1 to disable this rule, or a count of at least 1",
        ),
        (
            worker(completion={"minSucceededInstances": -5}),
            "taskRoles.worker.completion.minSucceededInstances",
            "must be at least -1, not -5",
            "use -1 to disable this rule, or a count of at least 1",
        ),
    ],
)
def test_a_number_too_small_says_the_least_allowed(
    data: dict[str, Any], path: str, message: str, fix: str
) -> None:
    assert problems(to_yaml(data)) == [(path, message, fix)]


def test_memory_too_small_says_what_every_task_needs() -> None:
    assert problems(to_yaml(resources(memoryMB=0))) == [
        (
            "taskRoles.worker.resourcePerInstance.memoryMB",
            "0 MB is less than the 64 MB every task needs (the task's runtime runs inside its memory limit "
            "and uses up to about 35 MB itself)",
            "ask for at least 64: `memoryMB: 64` or more",
        )
    ]


@pytest.mark.parametrize(
    ("data", "path"),
    [
        (worker(commands=[]), "taskRoles.worker.commands"),
        (job(taskRoles={}), "taskRoles"),
        (job(prerequisites=[]), "prerequisites"),
        (resources(ports={}), "taskRoles.worker.resourcePerInstance.ports"),
    ],
)
def test_an_empty_list_or_mapping_says_add_an_entry_or_remove_it(data: dict[str, Any], path: str) -> None:
    found = problems(to_yaml(data))
    assert found[0] == (path, "must not be empty", "add at least one entry or remove the field")


def test_an_empty_or_overlong_name_says_the_bounds() -> None:
    assert problems(to_yaml(job(name=""))) == [
        ("name", "must not be empty", "give a name of at least one character")
    ]
    assert problems(to_yaml(job(name="a" * 256)))[0] == ("name", "is too long", "use at most 255 characters")


@pytest.mark.parametrize(
    ("data", "path", "allowed", "given"),
    [
        (job(type="service"), "type", "'job'", "'service'"),
        (job(protocolVersion=3), "protocolVersion", "2 or '2'", "3"),
        (
            job(extras={"hivedScheduler": {"jobPriorityClass": "x"}}),
            "extras.hivedScheduler.jobPriorityClass",
            "'crit', 'prod', 'test' or 'oppo'",
            "'x'",
        ),
    ],
)
def test_a_value_not_allowed_lists_those_allowed(
    data: dict[str, Any], path: str, allowed: str, given: str
) -> None:
    assert problems(to_yaml(data)) == [
        (path, f"must be one of {allowed}, not {given}", f"use one of {allowed}")
    ]


@pytest.mark.parametrize(
    ("prerequisite", "message"),
    [
        ({"name": "x", "type": "zip", "uri": "y"}, "has an unknown or missing type 'zip'"),
        ({"name": "x", "uri": "y"}, "has an unknown or missing type"),
    ],
)
def test_a_prerequisite_of_an_unknown_type_lists_the_types(
    prerequisite: dict[str, Any], message: str
) -> None:
    data = job(prerequisites=[*BASE_JOB["prerequisites"], prerequisite])
    assert problems(to_yaml(data)) == [("prerequisites[2]", message, TYPE_FIX)]
