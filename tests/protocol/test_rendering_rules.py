"""What a job turns into, stated whole: the names a role's commands reach (its script, output and
data prerequisites under their protocol names), a broken template's problem, registry
credentials, the stored copy with secrets masked, and the job written back as YAML."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from libs.protocol import (
    JobConfig,
    JobProtocolError,
    dump_job_yaml,
    masked_config,
    parse_job,
    render_entrypoint,
)
from libs.protocol.rendering import docker_auth, role_commands, template_view
from tests.protocol.jobtexts import BASE_JOB, to_yaml

PREREQUISITES = [
    {"name": "image", "type": "dockerimage", "uri": "pytorch/pytorch:2.0"},
    {"name": "mnist", "type": "data", "protocolVersion": 2, "uri": ["https://example.com/mnist.tgz"]},
    {"name": "code", "type": "script", "uri": "https://example.com/code.git"},
    {"name": "model", "type": "output", "uri": "hdfs://out/model"},
]


def job_with(commands: list[str], **role: Any) -> JobConfig:
    data: dict[str, Any] = copy.deepcopy(BASE_JOB)
    data["prerequisites"] = PREREQUISITES
    data["taskRoles"]["worker"].update(commands=commands, script="code", output="model", **role)
    return parse_job(to_yaml(data))


def test_a_roles_commands_reach_its_script_output_and_data_by_their_protocol_names() -> None:
    job = job_with(
        ["get <% $script.uri %> <% $output.uri %> <% $data.uri[0] %> v<% $data.protocolVersion %>"]
    )
    assert render_entrypoint(job, "worker") == (
        "get https://example.com/code.git hdfs://out/model https://example.com/mnist.tgz v2"
    )
    assert template_view(job, "worker") == {
        "$script": {"name": "code", "type": "script", "uri": "https://example.com/code.git"},
        "$output": {"name": "model", "type": "output", "uri": "hdfs://out/model"},
        "$data": {
            "name": "mnist",
            "type": "data",
            "protocolVersion": 2,
            "uri": ["https://example.com/mnist.tgz"],
        },
    }


def test_a_field_a_prerequisite_leaves_out_stays_a_reference() -> None:
    job = job_with(["get <% $data.plugin %> <% $script.name %>"])
    assert render_entrypoint(job, "worker") == "get <% $data.plugin %> code"


def test_a_role_without_script_or_output_reaches_neither() -> None:
    data: dict[str, Any] = copy.deepcopy(BASE_JOB)
    data["taskRoles"]["worker"]["commands"] = ["echo <% $script.uri %> <% $output.uri %>"]
    job = parse_job(to_yaml(data))
    assert render_entrypoint(job, "worker") == "echo <% $script.uri %> <% $output.uri %>"
    assert set(template_view(job, "worker")) == {"$data"}


def test_a_broken_template_names_the_commands_and_how_to_write_references() -> None:
    data: dict[str, Any] = copy.deepcopy(BASE_JOB)
    data["taskRoles"]["worker"]["commands"] = ["echo <% $script.uri"]
    job = JobConfig.model_validate(data)  # as stored before the submission checks read templates
    with pytest.raises(JobProtocolError) as caught:
        render_entrypoint(job, "worker")
    (problem,) = caught.value.problems
    assert (problem.path, problem.message, problem.hint) == (
        "taskRoles.worker.commands",
        "the commands are not a valid template: the tag opened at character 5 is never closed with '%>'",
        "write references as `<% $parameters.name %>`, each closed on the same line",
    )


def test_commands_of_a_role_the_job_lacks_are_refused_naming_its_roles() -> None:
    with pytest.raises(KeyError) as caught:
        role_commands(job_with(["x"]), "ps")
    assert caught.value.args == ("the job has no task role 'ps'; it has ['worker']",)


def image_with(auth: dict[str, Any] | None, secrets: dict[str, Any] | None = None) -> JobConfig:
    data: dict[str, Any] = copy.deepcopy(BASE_JOB)
    data["prerequisites"][0]["uri"] = "registry.example.com/team/app:1"
    if auth is not None:
        data["prerequisites"][0]["auth"] = auth
    if secrets is not None:
        data["secrets"] = secrets
    return parse_job(to_yaml(data))


def test_registry_credentials_fill_in_secrets_and_leave_out_what_is_not_given() -> None:
    job = image_with({"username": "bot", "password": "<% $secrets.registry %>"}, {"registry": "s3cret"})
    assert docker_auth(job, "worker") == {"username": "bot", "password": "s3cret"}
    assert docker_auth(image_with({"password": "<% $secrets.none %>"}), "worker") == {
        "password": "<% $secrets.none %>"
    }
    assert docker_auth(image_with(None), "worker") is None


def test_an_image_the_job_does_not_hold_has_no_credentials() -> None:
    data: dict[str, Any] = copy.deepcopy(BASE_JOB)
    data["taskRoles"]["worker"]["dockerImage"] = "elsewhere"
    job = JobConfig.model_validate(data)
    assert docker_auth(job, "worker") is None


def test_the_stored_copy_masks_secrets_and_literal_passwords_only() -> None:
    job = image_with({"username": "bot", "password": "plain"}, {"token": "t", "key": {"nested": 1}})
    stored = masked_config(job)
    assert stored["secrets"] == {"token": "******", "key": "******"}
    assert stored["prerequisites"][0]["auth"] == {"username": "bot", "password": "******"}  # type: ignore[index]
    kept = masked_config(image_with({"password": "<% $secrets.token %>"}, {"token": "t"}))
    assert kept["prerequisites"][0]["auth"] == {"password": "<% $secrets.token %>"}  # type: ignore[index]
    no_password = masked_config(image_with({"username": "bot"}))
    assert no_password["prerequisites"][0]["auth"] == {"username": "bot"}  # type: ignore[index]


def test_the_stored_copy_is_the_job_under_its_protocol_names() -> None:
    stored = masked_config(parse_job(to_yaml(BASE_JOB)))
    assert stored == {
        "protocolVersion": 2,
        "name": "mnist_train",
        "type": "job",
        "prerequisites": BASE_JOB["prerequisites"],
        "jobRetryCount": 0,
        "taskRoles": {
            "worker": {
                "instances": 2,
                "completion": {"minFailedInstances": 1, "minSucceededInstances": 2},
                "taskRetryCount": 0,
                "dockerImage": "image",
                "data": "mnist",
                "resourcePerInstance": {"cpu": 4, "memoryMB": 8192, "gpu": 1, "ports": {"ssh": 1, "http": 1}},
                "commands": ["python train.py"],
            }
        },
        "defaults": {"virtualCluster": "default"},
    }


def test_a_job_without_prerequisites_is_stored_without_them() -> None:
    data: dict[str, Any] = copy.deepcopy(BASE_JOB)
    del data["prerequisites"]
    stored = masked_config(JobConfig.model_validate(data))
    assert "prerequisites" not in stored


def test_the_job_is_written_back_as_protocol_yaml_in_its_order_with_its_text_as_is() -> None:
    data: dict[str, Any] = copy.deepcopy(BASE_JOB)
    data["description"] = "Entraînement sur MNIST ✓"
    text = dump_job_yaml(parse_job(to_yaml(data)))
    assert text.startswith(
        "protocolVersion: 2\nname: mnist_train\ntype: job\n"
        "description: Entraînement sur MNIST ✓\nprerequisites:\n"
    )
    assert "  worker:\n    instances: 2\n    completion:\n      minFailedInstances: 1\n" in text
    assert "defaults:\n  virtualCluster: default\n" in text
    assert parse_job(text).model_dump() == parse_job(to_yaml(data)).model_dump()
