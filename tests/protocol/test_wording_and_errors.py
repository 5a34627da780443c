"""What a person reads of a refused job: counted nouns, each problem's place, message and fix."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from libs.protocol.errors import JobProtocolError, Problem, format_path
from libs.protocol.wording import counted


@pytest.mark.parametrize(
    ("number", "noun", "plural", "text"),
    [
        (1, "GPU", None, "1 GPU"),
        (2, "GPU", None, "2 GPUs"),
        (0, "GPU", None, "0 GPUs"),
        (1.0, "GPU", None, "1 GPU"),
        (2.0, "GPU", None, "2 GPUs"),
        (0.5, "GPU", None, "0.5 GPUs"),
        (1, "child", "children", "1 child"),
        (3, "child", "children", "3 children"),
    ],
)
def test_a_count_is_written_with_its_noun_in_the_right_number(
    number: float, noun: str, plural: str | None, text: str
) -> None:
    assert counted(number, noun, plural) == text


def test_a_problem_reads_place_message_and_fix() -> None:
    problem = Problem(path="taskRoles.worker.instances", message="must be at least 1", hint="set 1 or more")
    assert str(problem) == "taskRoles.worker.instances: must be at least 1 (set 1 or more)"


def test_a_problem_without_a_fix_reads_place_and_message() -> None:
    assert str(Problem(path="name", message="is required", hint="")) == "name: is required"


def test_a_problem_of_the_whole_document_says_so() -> None:
    problem = Problem(path="", message="is not a mapping", hint="write key: value lines")
    assert str(problem) == "(document): is not a mapping (write key: value lines)"


def test_a_problem_cannot_be_changed_once_made() -> None:
    problem = Problem(path="name", message="is required", hint="")
    with pytest.raises(ValidationError):
        problem.path = "other"  # type: ignore[misc]


def test_a_refused_job_lists_every_problem_in_order() -> None:
    problems = [
        Problem(path="name", message="is required", hint="name the job"),
        Problem(path="taskRoles", message="is empty", hint=""),
    ]
    error = JobProtocolError(iter(problems))
    assert error.problems == problems
    assert str(error) == "name: is required (name the job); taskRoles: is empty"


def test_a_refused_job_with_no_problem_named_still_says_it_is_invalid() -> None:
    error = JobProtocolError([])
    assert error.problems == []
    assert str(error) == "invalid job"


@pytest.mark.parametrize(
    ("parts", "text"),
    [
        ((), ""),
        (("name",), "name"),
        (("taskRoles", "worker", "commands", 0), "taskRoles.worker.commands[0]"),
        (("prerequisites", 2, "uri"), "prerequisites[2].uri"),
        ((0, "name"), "[0].name"),
        (("a", 1, 2), "a[1][2]"),
    ],
)
def test_a_path_reads_keys_with_dots_and_positions_in_brackets(
    parts: tuple[str | int, ...], text: str
) -> None:
    assert format_path(iter(parts)) == text
