"""The runtime puts itself under the task's limits before anything of the task runs, and a task
whose limits cannot be set does not run at all (245, a platform failure retried for free)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.exitcodes import CONFINE_FAILED
from tests.runtime.helpers import all_log, result_of, role, run_runtime, spec_for, write_spec

GREEDY = "python3 -c 'b = bytearray(512 * 1024 * 1024)' && echo GOT-IT || echo REFUSED"


def test_rlimits_hold_the_command_where_there_are_no_cgroups(tmp_path: Path) -> None:
    spec = spec_for(
        tmp_path,
        "worker",
        0,
        [role("worker")],
        GREEDY,
        confine={"rlimits": {"RLIMIT_DATA": 256 * 1024 * 1024}},
    )
    code, err = run_runtime(write_spec(tmp_path, spec))
    assert code == 0, err
    assert "REFUSED" in all_log(spec)
    assert "MemoryError" in all_log(spec)


def test_without_limits_the_same_command_gets_its_memory(tmp_path: Path) -> None:
    spec = spec_for(tmp_path, "worker", 0, [role("worker")], GREEDY)
    code, err = run_runtime(write_spec(tmp_path, spec))
    assert code == 0, err
    assert "GOT-IT" in all_log(spec)


@pytest.mark.parametrize(
    ("confine", "why"),
    [
        (
            {"cgroups": ["/nonexistent/pai-task-group"]},
            "cannot enter the task's cgroup /nonexistent/pai-task-group",
        ),
        ({"rlimits": {"RLIMIT_NOSUCH": 1}}, "no resource limit RLIMIT_NOSUCH on this system"),
    ],
    ids=["a cgroup that is gone", "a limit this system lacks"],
)
def test_a_task_whose_limits_cannot_be_set_never_runs(
    tmp_path: Path, confine: dict[str, object], why: str
) -> None:
    spec = spec_for(tmp_path, "worker", 0, [role("worker")], "touch ran", confine=confine)
    code, _ = run_runtime(write_spec(tmp_path, spec))
    assert code == CONFINE_FAILED
    result = result_of(spec)
    assert result["runtimeExit"]["phrase"] == "RuntimeConfineFailed"
    assert why in result["runtimeExit"]["reason"]
    assert result["failure"]["type"] == "transient"
    assert not (Path(spec["dirs"]["work_dir"]) / "ran").exists()
