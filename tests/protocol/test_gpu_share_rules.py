"""`extras.gpuShare` judged on its own, as a submitter reads each problem: the path, the whole
message and the whole fix; and the shares read from a job that passed."""

from __future__ import annotations

from typing import Any

import pytest

from libs.protocol.gpu_share import GpuShare, gpu_shares, share_problems

ROLES = {
    "infer": {"resourcePerInstance": {"cpu": 1, "memoryMB": 512, "gpu": 1}},
    "train": {"resourcePerInstance": {"cpu": 1, "memoryMB": 512, "gpu": 1}},
}
BASE = ("extras", "gpuShare")
MILLI_FIX = "gpuMilli counts thousandths of one GPU (500 is half); for whole GPUs drop gpuShare"
MEMORY_FIX = "give the device memory cap in MiB, e.g. 8192, or leave it out"


def found(share: Any, roles: Any = None) -> list[tuple[tuple[str | int, ...], str, str]]:
    return list(
        share_problems({"taskRoles": ROLES if roles is None else roles, "extras": {"gpuShare": share}})
    )


def test_no_share_section_has_no_problem() -> None:
    assert list(share_problems({"taskRoles": ROLES})) == []
    assert list(share_problems({"taskRoles": ROLES, "extras": None})) == []
    assert found(None) == []


@pytest.mark.parametrize("share", [[1], "half", 5])
def test_a_share_section_that_is_not_a_mapping_says_how_to_write_it(share: Any) -> None:
    assert found(share) == [
        (BASE, "gpuShare must be a mapping", "write `gpuShare: {taskRoles: {ROLE: {gpuMilli: 500}}}`")
    ]


def test_a_share_section_holds_only_task_roles() -> None:
    assert found({"roles": {}, "taskRoles": {"infer": {"gpuMilli": 500}}, "x": 1}) == [
        ((*BASE, "roles"), "unknown field 'roles' in gpuShare", "gpuShare holds only taskRoles"),
        ((*BASE, "x"), "unknown field 'x' in gpuShare", "gpuShare holds only taskRoles"),
    ]


@pytest.mark.parametrize("roles", [None, [1], "infer"])
def test_task_roles_that_are_not_a_mapping_say_how_to_write_them(roles: Any) -> None:
    assert found({"taskRoles": roles}) == [
        (
            (*BASE, "taskRoles"),
            "gpuShare.taskRoles must be a mapping of task role names",
            "write `taskRoles: {ROLE: {gpuMilli: 500}}`",
        )
    ]


def test_each_role_not_in_the_job_is_named_with_the_jobs_roles() -> None:
    assert found({"taskRoles": {"nope": {"gpuMilli": 500}, "gone": 1, "infer": {"gpuMilli": 250}}}) == [
        ((*BASE, "taskRoles", "nope"), "task role 'nope' does not exist", "name one of: infer, train"),
        ((*BASE, "taskRoles", "gone"), "task role 'gone' does not exist", "name one of: infer, train"),
    ]


def test_each_roles_share_that_is_not_a_mapping_is_named() -> None:
    fix = "write `{gpuMilli: 500}` (and optionally gpuMemoryMiB)"
    assert found({"taskRoles": {"infer": 500, "train": [500]}}) == [
        ((*BASE, "taskRoles", "infer"), "a role's share must be a mapping", fix),
        ((*BASE, "taskRoles", "train"), "a role's share must be a mapping", fix),
    ]


def test_a_roles_share_holds_only_its_two_fields() -> None:
    assert found({"taskRoles": {"infer": {"gpuMilli": 500, "milli": 5}}}) == [
        (
            (*BASE, "taskRoles", "infer", "milli"),
            "unknown field 'milli'",
            "allowed fields: gpuMilli, gpuMemoryMiB",
        )
    ]


@pytest.mark.parametrize("milli", [1, 2, 500, 999])
def test_a_share_from_one_to_999_thousandths_passes(milli: int) -> None:
    assert found({"taskRoles": {"infer": {"gpuMilli": milli, "gpuMemoryMiB": 1}}}) == []


@pytest.mark.parametrize("milli", [0, 1000, -5, 2.5, True, "500", None])
def test_any_other_share_says_the_range_and_what_it_counts(milli: Any) -> None:
    assert found({"taskRoles": {"infer": {"gpuMilli": milli}}}) == [
        (
            (*BASE, "taskRoles", "infer", "gpuMilli"),
            f"gpuMilli must be a whole number from 1 to 999, not {milli!r}",
            MILLI_FIX,
        )
    ]


@pytest.mark.parametrize("memory", [1, 2, 8192, 1 << 20])
def test_a_memory_cap_up_to_a_tebibyte_passes(memory: int) -> None:
    assert found({"taskRoles": {"infer": {"gpuMilli": 500, "gpuMemoryMiB": memory}}}) == []


@pytest.mark.parametrize("memory", [0, (1 << 20) + 1, 1.5, False, "8G"])
def test_any_other_memory_cap_says_the_range(memory: Any) -> None:
    assert found({"taskRoles": {"infer": {"gpuMilli": 500, "gpuMemoryMiB": memory}}}) == [
        (
            (*BASE, "taskRoles", "infer", "gpuMemoryMiB"),
            "gpuMemoryMiB must be a whole number from 1 to 1048576",
            MEMORY_FIX,
        )
    ]


@pytest.mark.parametrize(
    ("resources", "given"),
    [({"gpu": 2}, "2"), ({"gpu": 0}, "0"), ({}, "0"), (None, "0"), ({"gpu": "1"}, "'1'")],
)
def test_a_shared_role_asks_for_one_gpu(resources: Any, given: str) -> None:
    roles = {"infer": {"resourcePerInstance": resources}, "train": ROLES["train"]}
    assert found({"taskRoles": {"infer": {"gpuMilli": 500}, "train": {"gpuMilli": 500}}}, roles) == [
        (
            ("taskRoles", "infer", "resourcePerInstance", "gpu"),
            f"a role with a GPU share asks for gpu: 1, not {given}",
            "set resourcePerInstance.gpu to 1 (the share is of that one GPU)",
        )
    ]


def test_every_problem_of_every_role_is_told() -> None:
    problems = found(
        {"taskRoles": {"infer": {"gpuMilli": 0, "gpuMemoryMiB": 0}, "train": {"gpuMilli": 1000}}}
    )
    assert [path[-1] for path, _, _ in problems] == ["gpuMilli", "gpuMemoryMiB", "gpuMilli"]


def test_the_shares_of_a_passed_job_are_read() -> None:
    extras = {
        "gpuShare": {
            "taskRoles": {
                "infer": {"gpuMilli": 1, "gpuMemoryMiB": 8192},
                "train": {"gpuMilli": 999, "gpuMemoryMiB": 1.5},
                "whole": {"gpuMilli": 1000},
                "none": {"gpuMilli": 0},
                "flag": {"gpuMilli": True},
                "text": {"gpuMilli": "500"},
                "odd": 5,
            }
        }
    }
    assert gpu_shares(extras) == {"infer": GpuShare(1, 8192), "train": GpuShare(999, None)}
    assert gpu_shares({"gpuShare": {"taskRoles": {"a": {"gpuMilli": 500, "gpuMemoryMiB": True}}}}) == {
        "a": GpuShare(500, None)
    }
    assert gpu_shares(None) == {}
    assert gpu_shares({"gpuShare": None}) == {}


@pytest.mark.parametrize(("milli", "percent"), [(1, 1), (4, 1), (5, 1), (15, 2), (500, 50), (999, 100)])
def test_a_share_reads_as_a_whole_percentage_of_at_least_one(milli: int, percent: int) -> None:
    assert GpuShare(milli).percentage == percent
