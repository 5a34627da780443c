"""All tasks together are held below the machine, and the node offers what is left.

Over fake cgroup directories (any machine): the platform's parent group of every task gets the
machine's memory and process table less the platform's reserve, in cgroup v1 and v2 alike. And
the figures themselves (libs/protocol/capacity.py): the reserve, the offer, the per-task default.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from libs.protocol.capacity import (
    Machine,
    node_offer,
    reserve_for,
    task_pids_default,
    tasks_memory_mb,
    tasks_pids,
)
from services.orchestrator.adapters.confinement import TasksBudget, detect, platform_scope

SMALL = Machine(cores=2, memory_mb=24_000, pid_cap=32_768)
BUDGET = TasksBudget(memory_bytes=3 * 2**30, pids=7_000)


def _v1(root: Path) -> None:
    for controller in ("memory", "cpu", "pids", "devices"):
        (root / controller).mkdir(parents=True)
        (root / controller / "cgroup.procs").write_text("")


def test_cgroup_v1_holds_all_tasks_to_the_budget_in_memory_and_processes(tmp_path: Path) -> None:
    _v1(tmp_path)
    data_dir = tmp_path / "data"
    found = detect(data_dir, root=tmp_path, self_cgroup="4:memory:/outer\n8:pids:/\n", euid=0, budget=BUDGET)
    scope = platform_scope(data_dir)
    memory = tmp_path / "memory" / "outer" / scope
    assert found.bases["memory"] == memory
    assert (memory / "memory.limit_in_bytes").read_text() == str(3 * 2**30)
    assert (tmp_path / "pids" / scope / "pids.max").read_text() == "7000"
    assert "all tasks together: 3,072 MB memory, 7,000 processes" in found.describe()


def test_cgroup_v2_holds_all_tasks_to_the_budget_in_memory_and_processes(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids")
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory pids")
    data_dir = tmp_path / "data"
    found = detect(data_dir, root=tmp_path, self_cgroup="0::/\n", euid=0, budget=BUDGET)
    base = tmp_path / platform_scope(data_dir)
    assert found.bases == {"unified": base}
    assert (base / "memory.max").read_text() == str(3 * 2**30)
    assert (base / "pids.max").read_text() == "7000"
    assert found.budget == BUDGET


def test_without_root_there_is_no_group_and_no_budget_to_claim(tmp_path: Path) -> None:
    _v1(tmp_path)
    found = detect(tmp_path / "data", root=tmp_path, self_cgroup="", euid=1000, budget=BUDGET)
    assert found.budget is None
    assert "all tasks together" not in found.describe()


def test_the_reserve_is_a_tenth_with_floors_and_an_admins_figures_win() -> None:
    reserve = reserve_for(SMALL)
    assert (reserve.cpus, reserve.memory_mb, reserve.pids) == (0.5, 2_400, 3_277)
    assert reserve_for(Machine(1, 4_000, 4_096)).memory_mb == 1_024  # the floor
    assert reserve_for(Machine(1, 1_500, 1_500)).memory_mb == 750  # never more than half
    assert reserve_for(SMALL, cpus=1, memory_mb=500, pids=100) == type(reserve)(1, 500, 100)
    assert tasks_memory_mb(SMALL, reserve) == 21_600
    assert tasks_pids(SMALL, reserve) == 29_491


def test_sixteen_tasks_at_their_process_limit_still_fit_under_all_tasks_limit() -> None:
    reserve = reserve_for(SMALL)
    per_task = task_pids_default(SMALL, reserve)
    assert per_task == 29_491 // 16
    assert 16 * per_task <= tasks_pids(SMALL, reserve)
    big = Machine(64, 512_000, 4_194_304)
    assert task_pids_default(big, reserve_for(big)) == 4_096  # never above the old default


@pytest.mark.parametrize(
    ("overcommit", "declared", "cpu", "memory_mb"),
    [
        pytest.param((1, 1), (None, None), 1, 21_600, id="the-machine-less-the-reserve"),
        pytest.param((4, 1), (None, None), 6, 21_600, id="cpu-overcommitted"),
        pytest.param((1, 2), (None, None), 1, 43_200, id="memory-overcommitted"),
        pytest.param((4, 4), (32, 96_000), 32, 96_000, id="declared-figures-win"),
    ],
)
def test_the_node_offers_the_machine_less_the_reserve_unless_declared(
    overcommit: tuple[float, float], declared: tuple[int | None, int | None], cpu: int, memory_mb: int
) -> None:
    offer = node_offer(
        SMALL,
        reserve_for(SMALL),
        cpu_overcommit=overcommit[0],
        memory_overcommit=overcommit[1],
        declared_cpus=declared[0],
        declared_memory_mb=declared[1],
    )
    assert (offer.cpu, offer.memory_mb) == (cpu, memory_mb)
    assert offer.how.startswith(f"node offers {cpu} CPUs")
    if declared[0] is not None:
        assert "declared, PAI_NODE_CPUS" in offer.how
    else:
        assert "2 cores less 0.5 reserved" in offer.how
