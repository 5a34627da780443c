"""The checks OpenPAI makes after its schema, as a submitter reads them: each problem with its
path, whole message and fix (prerequisites named twice or nowhere, a prerequisite of the wrong
type, deployments, HiveD's task roles, image references and command templates)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from libs.protocol import JobProtocolError, parse_job
from tests.protocol.jobtexts import BASE_JOB, job, to_yaml

PRE = BASE_JOB["prerequisites"]
LINE = re.compile(r" \(line \d+\)$")
NOT_A_TEMPLATE = "write references as `<% $parameters.name %>`, each closed on the same line"
UNCLOSED = "the commands are not a valid template: the tag opened at character 5 is never closed with '%>'"


def problems(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(path, message without its line, hint) of every problem of ``data``; [] when it parses."""
    try:
        parse_job(to_yaml(data))
    except JobProtocolError as exc:
        return [(p.path, LINE.sub("", p.message), p.hint) for p in exc.problems]
    return []


def worker(**changes: Any) -> dict[str, Any]:
    return {**BASE_JOB["taskRoles"]["worker"], **changes}


def test_a_prerequisite_named_twice_in_its_type_names_the_first() -> None:
    data = job(
        prerequisites=[
            *PRE,
            {"name": "image", "type": "data", "uri": ["x"]},
            {"name": "image", "type": "dockerimage", "uri": "y:1"},
            {"name": "image", "type": "dockerimage", "uri": "z:1"},
        ]
    )
    first = "duplicate dockerimage prerequisite 'image', first defined at prerequisites[0]"
    fix = "give each prerequisite of a type its own name, or remove the copy"
    assert problems(data) == [("prerequisites[3].name", first, fix), ("prerequisites[4].name", first, fix)]


@pytest.mark.parametrize(
    ("wanted", "hint"),
    [("imag", "did you mean 'image'?"), ("zzz", "add it to the job's prerequisites list")],
)
def test_a_role_s_prerequisite_list_names_prerequisites_of_any_type(wanted: str, hint: str) -> None:
    data = job(taskRoles={"worker": worker(prerequisites=["image", "mnist", wanted])})
    assert problems(data) == [
        ("taskRoles.worker.prerequisites[2]", f"prerequisite {wanted!r} does not exist", hint)
    ]


@pytest.mark.parametrize(
    ("field", "wanted", "hint"),
    [
        ("dockerImage", "mnist", "'mnist' is a data prerequisite; dockerImage needs one of type dockerimage"),
        ("data", "image", "'image' is a dockerimage prerequisite; data needs one of type data"),
        ("dockerImage", "imgae", "did you mean 'image'?"),
        ("output", "imgae", "add a prerequisite with type: output"),
        ("script", "setup", "add a prerequisite with type: script"),
    ],
    ids=["data-as-image", "image-as-data", "misspelt-image", "no-output-of-that-name", "no-script"],
)
def test_a_role_s_prerequisite_field_needs_one_of_its_own_type(field: str, wanted: str, hint: str) -> None:
    data = job(taskRoles={"worker": worker(**{field: wanted})})
    assert problems(data) == [(f"taskRoles.worker.{field}", f"prerequisite {wanted!r} does not exist", hint)]


def test_a_prerequisite_of_an_unknown_type_provides_nothing() -> None:
    data = job(prerequisites=[{"name": "image", "type": "container", "uri": "x:1"}, PRE[1]])
    wanted = ("prerequisite 'image' does not exist", "add a prerequisite with type: dockerimage")
    assert [p[1:] for p in problems(data) if p[0] == "taskRoles.worker.dockerImage"] == [wanted]


def test_deployments_have_their_own_names_and_the_default_names_one() -> None:
    deployments = [
        {"name": n, "taskRoles": {"worker": {"preCommands": ["true"]}}} for n in ("a", "b", "a", "a")
    ]
    data = job(deployments=deployments, defaults={"deployment": "c"})
    fix = "give each deployment its own name"
    assert problems(data) == [
        ("deployments[2].name", "duplicate deployment 'a', first defined at deployments[0]", fix),
        ("deployments[3].name", "duplicate deployment 'a', first defined at deployments[0]", fix),
        (
            "defaults.deployment",
            "default deployment 'c' does not exist",
            "add it under deployments or remove this line",
        ),
    ]
    close = job(deployments=deployments[:2], defaults={"deployment": "bb"})
    assert problems(close) == [
        ("defaults.deployment", "default deployment 'bb' does not exist", "did you mean 'b'?")
    ]
    assert problems(job(deployments=deployments[:2], defaults={"deployment": "b"})) == []


@pytest.mark.parametrize(
    ("role", "hint"), [("workr", "did you mean 'worker'?"), ("ps", "name one of the job's task roles")]
)
def test_hived_settings_name_the_job_s_task_roles(role: str, hint: str) -> None:
    data = job(extras={"hivedScheduler": {"taskRoles": {"worker": {}, role: {}}}})
    assert problems(data) == [
        (f"extras.hivedScheduler.taskRoles.{role}", f"task role {role!r} does not exist", hint)
    ]


def test_a_docker_image_reference_is_checked_unless_a_template_fills_it() -> None:
    bad = {"name": "image", "type": "dockerimage", "uri": "Bad Image"}
    assert problems(job(prerequisites=[bad, PRE[1]])) == [
        (
            "prerequisites[0].uri",
            "'Bad Image' is not a docker image reference: it contains white space",
            "write the image as name[:tag] or name@sha256:digest, e.g. `ubuntu:22.04` or "
            "`ghcr.io/org/app:1.0`",
        )
    ]
    templated = {"name": "image", "type": "dockerimage", "uri": "<% $parameters.image %>"}
    assert problems(job(prerequisites=[templated, PRE[1]], parameters={"image": "a b"})) == []
    # A script's URI is no image reference.
    assert problems(job(prerequisites=[*PRE, {"name": "s", "type": "script", "uri": "Bad Image"}])) == []


@pytest.mark.parametrize(
    ("deployment", "at"),
    [
        ({"preCommands": ["echo <% $y"]}, 5),
        ({"postCommands": ["echo <% $y"]}, 21),
        ({"preCommands": ["echo <% $y"]}, None),
    ],
    ids=["pre-commands", "post-commands", "a-deployment-not-chosen"],
)
def test_the_commands_a_task_runs_are_one_template_with_its_deployment_s(
    deployment: dict[str, list[str]], at: int | None
) -> None:
    """Pre-commands, the role's commands and post-commands in that order (the character counts
    from the first); a deployment the job does not choose is not run."""
    data = job(
        deployments=[{"name": "d", "taskRoles": {"worker": deployment}}],
        defaults={"deployment": "d"} if at else None,
    )
    message = (
        f"the commands are not a valid template: the tag opened at character {at} is never closed with '%>'"
    )
    expected = [("taskRoles.worker.commands", message, NOT_A_TEMPLATE)] if at else []
    assert problems(data) == expected
    assert problems(job(taskRoles={"worker": worker(commands=["echo <% $x"])})) == [
        ("taskRoles.worker.commands", UNCLOSED, NOT_A_TEMPLATE)
    ]


def test_an_image_reference_is_at_most_463_characters_long() -> None:
    """255 for the name, 128 for the tag, 80 for the rest (registry, ':' and '@sha256:...')."""

    def uri_problems(uri: str) -> list[tuple[str, str, str]]:
        return problems(job(prerequisites=[{"name": "image", "type": "dockerimage", "uri": uri}, PRE[1]]))

    assert uri_problems("a" * 463) == []
    assert [p[:2] for p in uri_problems("a" * 464)] == [
        ("prerequisites[0].uri", "is too long to be a docker image reference")
    ]


def test_a_prerequisite_of_an_unknown_type_does_not_hide_the_ones_after_it() -> None:
    data = job(prerequisites=[{"name": "other", "type": "container", "uri": "x:1"}, *PRE])
    assert [p[0] for p in problems(data)] == ["prerequisites[0]"]
