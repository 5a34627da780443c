"""Entrypoints and stored copies come out as OpenPAI's server would produce them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from libs.protocol import JobProtocolError, dump_job_yaml, masked_config, parse_job, render_entrypoint
from libs.protocol.rendering import docker_auth
from tests.protocol.anchors import JOBS, NEEDED
from tests.protocol.jobtexts import BASE_JOB, job, to_yaml
from tests.support.anchors import needs


def with_commands(commands: list[str], **changes: Any) -> str:
    data = job(**changes)
    data["taskRoles"]["worker"]["commands"] = commands
    return to_yaml(data)


@needs(*NEEDED)
def test_the_marketplace_tensorflow_job_renders_deployment_and_references() -> None:
    parsed = parse_job((JOBS / "pai/marketplace-v2/tensorflow-cifar10.yaml").read_text(encoding="utf-8"))
    worker = render_entrypoint(parsed, "worker").split("\n")
    assert worker[:3] == [
        "rm /usr/local/cuda/lib64/stubs/libcuda.so.1",
        "wget -qO- https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz | tar xvz"
        " && mv cifar-10-batches-py data_cifar10",
        "git clone https://github.com/MaggieQi/benchmarks script_tensorflow_cnnbenchmarks &&"
        " cd script_tensorflow_cnnbenchmarks"
        " && git checkout 84820935288cab696c9c2ac409cbd46a1f24723d && cd ..",
    ]
    assert worker[3] == "cd script_tensorflow_cnnbenchmarks/scripts/tf_cnn_benchmarks"
    assert worker[4].startswith("python tf_cnn_benchmarks.py --job_name=worker ")
    assert "--data_name=cifar10 --data_dir=$PAI_WORK_DIR/data_cifar10" in worker[4]
    assert (
        "--train_dir=$PAI_WORK_DIR/output_tensorflow_cifar10_model --model=resnet20 --batch_size=32"
        in worker[4]
    )
    assert len(worker) == 5
    ps = render_entrypoint(parsed, "psserver").split("\n")
    assert ps[-1] == 'echo "Uploading data ..."'


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        pytest.param("train --lr <% $parameters.lr %>", "train --lr 0.01", id="decimal parameter"),
        pytest.param(
            "train --epochs <% $parameters.epochs %>", "train --epochs 1", id="whole float as integer"
        ),
        pytest.param("run <%$parameters.flag%>", "run true", id="boolean and tags without spaces"),
        pytest.param("run <% $parameters.hosts %>", "run a,b", id="list joined with commas"),
        pytest.param("run <% $parameters.hosts[1] %>", "run b", id="list index"),
        pytest.param("run <% $parameters.name.length %>", "run 5", id="text length"),
        pytest.param(
            "get <% $data.uri[0] %> <% $data.name %>", "get https://example.com/mnist.tgz mnist", id="data"
        ),
        pytest.param("get <% $data.uri[3] %>", "get <% $data.uri.3 %>", id="index past the end kept"),
        pytest.param(
            "run <% $parameters.unknown %>", "run <% $parameters.unknown %>", id="unknown parameter kept"
        ),
        pytest.param(
            "login <% $secrets.token %>", "login <% $secrets.token %>", id="secret left for the runtime"
        ),
        pytest.param("cd <% $script.name %>", "cd <% $script.name %>", id="no script selected"),
        pytest.param(
            "echo <%#flag%>on<%/flag%>done<%! note %>", "echo done", id="sections and comments dropped"
        ),
        pytest.param("echo <%{raw}%> <%&raw%>x", "echo  x", id="unescaped tags dropped"),
        pytest.param("  padded   ", "padded", id="command trimmed"),
    ],
)
def test_command_templates_render_as_in_openpai(command: str, expected: str) -> None:
    parameters = {"lr": 0.01, "epochs": 1.0, "flag": True, "hosts": ["a", "b"], "name": "mnist"}
    parsed = parse_job(with_commands([command], parameters=parameters, secrets={"token": "s3cret"}))
    assert render_entrypoint(parsed, "worker") == expected


def test_commands_are_joined_one_per_line_inside_pre_and_post_commands() -> None:
    deployments = [
        {"name": "other", "taskRoles": {"worker": {"preCommands": ["never"]}}},
        {"name": "prod", "taskRoles": {"worker": {"preCommands": ["  setup  "], "postCommands": ["upload"]}}},
    ]
    text = with_commands(["step one", "step two"], deployments=deployments, defaults={"deployment": "prod"})
    assert render_entrypoint(parse_job(text), "worker") == "setup\nstep one\nstep two\nupload"


def test_without_a_default_deployment_only_the_role_commands_run() -> None:
    deployments = [{"name": "prod", "taskRoles": {"worker": {"preCommands": ["setup"]}}}]
    parsed = parse_job(with_commands(["train"], deployments=deployments))
    assert render_entrypoint(parsed, "worker") == "train"


def test_rendering_an_unknown_role_names_the_roles_there_are() -> None:
    with pytest.raises(KeyError, match="worker"):
        render_entrypoint(parse_job(to_yaml(BASE_JOB)), "chief")


def secret_job() -> dict[str, Any]:
    data = copy.deepcopy(BASE_JOB)
    data["secrets"] = {"registry_password": "hunter2", "token": "abc"}
    data["prerequisites"][0]["auth"] = {
        "username": "me",
        "password": "<% $secrets.registry_password %>",
        "registryuri": "registry.example.com",
    }
    data["prerequisites"].append(
        {
            "name": "plain",
            "type": "dockerimage",
            "uri": "x",
            "auth": {"username": "me", "password": "literal"},
        }
    )
    return data


def test_the_stored_copy_masks_every_secret_and_literal_password() -> None:
    parsed = parse_job(to_yaml(secret_job()))
    stored = masked_config(parsed)
    assert stored["secrets"] == {"registry_password": "******", "token": "******"}
    prerequisites: Any = stored["prerequisites"]
    assert prerequisites[0]["auth"]["password"] == "<% $secrets.registry_password %>"
    assert prerequisites[2]["auth"]["password"] == "******"
    assert "hunter2" not in repr(stored)
    assert "literal" not in repr(stored)
    # The stored copy is itself a valid job, so it can be cloned and resubmitted.
    assert parse_job(to_yaml(stored)).name == parsed.name
    # Masking works on a copy: the job itself still holds the secrets.
    assert parsed.secrets == {"registry_password": "hunter2", "token": "abc"}


def test_registry_credentials_get_their_secrets_filled_in() -> None:
    parsed = parse_job(to_yaml(secret_job()))
    assert docker_auth(parsed, "worker") == {
        "username": "me",
        "password": "hunter2",
        "registryuri": "registry.example.com",
    }


def test_the_yaml_dump_parses_back_to_the_same_job() -> None:
    parsed = parse_job(to_yaml(secret_job()))
    assert parse_job(dump_job_yaml(parsed)) == parsed


def test_a_template_error_in_a_hand_built_job_is_a_protocol_error() -> None:
    parsed = parse_job(to_yaml(BASE_JOB))
    parsed.task_roles["worker"].commands = ["echo <% $parameters.x"]
    with pytest.raises(JobProtocolError) as caught:
        render_entrypoint(parsed, "worker")
    assert caught.value.problems[0].path == "taskRoles.worker.commands"
