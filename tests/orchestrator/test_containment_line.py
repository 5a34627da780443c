"""`pai up` says what holds for local tasks: their users, the limits enforced and by what, and
what is not enforced, with the reason."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from services.orchestrator.adapters.confinement import detect
from services.orchestrator.adapters.isolation import containment_line


def test_a_platform_that_is_not_root_says_what_it_cannot_hold_and_why(tmp_path: Path) -> None:
    found = detect(tmp_path, euid=1000)
    assert found.mechanism == "rlimits"
    assert found.bases == {}
    line = found.describe()
    assert line.startswith("task limits: memory (RLIMIT_DATA, per process); not enforced: ")
    assert "cpu (the platform is not root: no cgroups)" in line
    assert "pids (the platform is not root: no cgroups)" in line
    assert "disk (a task's work dir has no size cap" in line


def test_cgroup_v1_without_a_controller_names_the_one_missing(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making groups needs root")
    fake = tmp_path / "cgroup"
    for controller in ("memory", "cpu", "pids"):
        (fake / controller).mkdir(parents=True)
        (fake / controller / "cgroup.procs").touch()
    found = detect(tmp_path / "data", root=fake, self_cgroup="4:memory:/inner\n1:cpu:/\n")
    assert found.mechanism == "cgroup v1"
    assert set(found.enforced) == {"memory", "cpu", "pids"}
    assert found.missing["gpu devices"] == "no devices cgroup controller is mounted"
    # Under the platform's own group of each controller, in a folder of its data dir's.
    assert found.bases["memory"].parent == fake / "memory" / "inner"
    assert found.bases["memory"].name.startswith("pai-")


@pytest.mark.skipif(os.geteuid() != 0, reason="a root platform")
def test_a_root_platform_names_the_tenants_range_and_its_cgroups(tmp_path: Path) -> None:
    line = containment_line(
        tmp_path, {"PAI_TASK_UIDS": "1800600000-1800600999", "PAI_TASK_UID_REGISTRY": str(tmp_path / "r")}
    )
    assert line.startswith("task users: a uid per platform user, from 1800600000-1800600999; task limits: ")
    assert "memory (cgroup v1)" in line
    assert "cpu (cgroup v1)" in line
    assert "pids (cgroup v1)" in line
    assert "not enforced: disk" in line


def test_a_wrong_task_user_setting_is_said_not_raised(tmp_path: Path) -> None:
    line = containment_line(tmp_path, {"PAI_TASK_USER": "no-such-user-here"})
    assert line.startswith("task users: none (PAI_TASK_USER=no-such-user-here: no such user")
