"""Run-time reconfiguration re-adds running jobs and names the harm; per-user limits hold jobs back."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from services.scheduler.core.placements import JobDemand, NodeInventory, Placed, TaskDemand, Waiting
from services.scheduler.core.reconfigure import (
    ReconfigurationError,
    SchedulerConfig,
    build_policy,
    config_from_document,
    merge_document,
    readd_running,
)
from services.scheduler.core.user_limits import UserLimitedPolicy, VcUserLimit, parse_user_limits
from tests.scheduler.clusters import two_rack_config

NODES = [NodeInventory(f"n{i}", f"10.0.0.{i}", 32, 262144, 4, "A100") for i in range(4)]


def demand(job_id: str, vc: str, gpus: int, user: str = "alice", tasks: int = 1) -> JobDemand:
    return JobDemand(
        job_id, user, vc, 0, tuple(TaskDemand("w", i, 1, 1024, gpus, sku_type="A100") for i in range(tasks))
    )


def running_in(
    config: dict[str, Any], *jobs: JobDemand
) -> tuple[UserLimitedPolicy, list[tuple[JobDemand, Placed]]]:
    policy = build_policy(SchedulerConfig(config), NODES)
    out: list[tuple[JobDemand, Placed]] = []
    for d in jobs:
        decision = policy.decide(d)
        assert isinstance(decision, Placed), decision
        out.append((d, decision))
    return policy, out


def check(new_config: dict[str, Any], running: list[tuple[JobDemand, Placed]]) -> Any:
    return readd_running(build_policy(SchedulerConfig(new_config), NODES), running, {})


def test_a_change_that_keeps_every_job_inside_its_vc_is_safe() -> None:
    _, running = running_in(two_rack_config(), demand("j1", "a", 4, tasks=2))
    # VC b has no job: its rack can go to VC a, which keeps the nodes j1 runs on.
    grown = {
        **two_rack_config(),
        "virtualClusters": {"a": {"virtualCells": [{"cellType": "A100-RACK.A100-NODE", "cellNumber": 4}]}},
    }
    impact = check(grown, running)
    assert impact.safe
    assert impact.summary() == ""


A_GONE = {"b": {"virtualCells": [{"cellType": "A100-RACK", "cellNumber": 1}]}}
A_EMPTY = {"a": {"virtualCells": []}, "b": {"virtualCells": [{"cellType": "A100-RACK", "cellNumber": 2}]}}


@pytest.mark.parametrize("vcs", [A_GONE, A_EMPTY], ids=["vc-removed", "cells-moved-to-b"])
def test_a_change_that_takes_a_running_jobs_cells_downgrades_it(vcs: dict[str, Any]) -> None:
    _, running = running_in(two_rack_config(), demand("j1", "a", 4), demand("j2", "b", 4))
    new = {**two_rack_config(), "virtualClusters": copy.deepcopy(vcs)}
    impact = check(new, running)
    assert not impact.safe
    assert set(impact.downgraded) == {"j1"}
    assert not impact.killed
    assert "no longer fit VC a" in impact.downgraded["j1"]
    assert "j1 in VC a would be left running without its VC guarantee" in impact.summary()


def test_a_change_that_drops_a_running_jobs_node_would_kill_it() -> None:
    _, running = running_in(two_rack_config(), demand("j2", "b", 4, tasks=2))
    nodes = {p.node for p in running[0][1].tasks}
    new = two_rack_config()
    new["physicalCluster"]["physicalCells"] = [
        c
        for c in new["physicalCluster"]["physicalCells"]
        if not {ch["cellAddress"] for ch in c["cellChildren"]} & nodes
    ]
    new["virtualClusters"] = {"a": new["virtualClusters"]["a"]}
    impact = check(new, running)
    assert set(impact.killed) == {"j2"}
    assert "are in no cell of the new config" in impact.killed["j2"]


def test_a_partial_document_keeps_the_cells_and_the_limits_it_does_not_mention() -> None:
    current = SchedulerConfig(two_rack_config(), parse_user_limits({"a": {"maxGpusPerUser": 4}}))
    merged = merge_document(
        {"virtualClusters": {"a": two_rack_config()["virtualClusters"]["a"]}}, current, current.hived
    )
    assert merged.hived is not None
    assert merged.hived["physicalCluster"] == two_rack_config()["physicalCluster"]
    assert list(merged.hived["virtualClusters"]) == ["a"]
    assert merged.user_limits == {"a": VcUserLimit(4)}
    assert config_from_document(merged.document()) == merged


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"virtualClusters": {}}, "virtualClusters"),
        ({"virtualCluster": {}}, "unknown top-level field(s) ['virtualCluster']"),
        ({"userLimits": {"zz": {"maxGpusPerUser": 1}}}, "userLimits: VC(s) ['zz']"),
        ({"userLimits": {"a": {"maxGpusPerUser": -1}}}, "userLimits.a.maxGpusPerUser"),
        ({"userLimits": {"a": {"maxGPUs": 1}}}, "userLimits.a: unknown field(s) ['maxGPUs']"),
        ([1, 2], "must be a mapping"),
    ],
)
def test_a_bad_document_is_refused_naming_the_field(doc: Any, field: str) -> None:
    current = SchedulerConfig(two_rack_config())
    with pytest.raises(ReconfigurationError, match=None) as err:
        merge_document(doc, current, current.hived)
    assert field in str(err.value)


def test_a_bad_cell_config_is_a_reconfiguration_error() -> None:
    bad = two_rack_config()
    bad["virtualClusters"]["a"]["virtualCells"][0]["cellType"] = "A100-RACK.NOPE"
    with pytest.raises(ReconfigurationError, match="NOPE"):
        build_policy(SchedulerConfig(bad), NODES)


@pytest.mark.parametrize(
    ("limits", "user", "running_gpus", "new_gpus", "placed", "field"),
    [
        ({"a": {"maxGpusPerUser": 4}}, "alice", 4, 4, False, "userLimits.a.maxGpusPerUser"),
        ({"a": {"maxGpusPerUser": 8}}, "alice", 4, 4, True, ""),
        ({"a": {"maxGpusPerUser": 4}}, "bob", 4, 4, True, ""),  # alice's use does not count for bob
        (
            {"a": {"maxGpusPerUser": 8, "users": {"alice": 4}}},
            "alice",
            4,
            2,
            False,
            "userLimits.a.users.alice",
        ),
        ({"b": {"maxGpusPerUser": 1}}, "alice", 4, 4, True, ""),  # another VC's limit
    ],
)
def test_a_job_over_its_users_limit_waits_naming_the_limit(
    limits: dict[str, Any], user: str, running_gpus: int, new_gpus: int, placed: bool, field: str
) -> None:
    policy = build_policy(SchedulerConfig(two_rack_config(), parse_user_limits(limits)), NODES)
    assert isinstance(policy.decide(demand("first", "a", running_gpus)), Placed)
    decision = policy.decide(demand("second", "a", new_gpus, user=user))
    if placed:
        assert isinstance(decision, Placed)
    else:
        assert isinstance(decision, Waiting)
        assert field in decision.reason
        assert f"user {user}" in decision.reason
        assert f"{running_gpus} are in use" in decision.reason


def test_a_finished_job_gives_its_user_room_again() -> None:
    policy = build_policy(
        SchedulerConfig(two_rack_config(), parse_user_limits({"a": {"maxGpusPerUser": 4}})), NODES
    )
    assert isinstance(policy.decide(demand("first", "a", 4)), Placed)
    assert isinstance(policy.decide(demand("second", "a", 4)), Waiting)
    policy.release("first")
    assert isinstance(policy.decide(demand("second", "a", 4)), Placed)
    assert policy.usage() == {"a": {"alice": 4}}


def test_limits_alone_keep_cells_derived_from_the_nodes() -> None:
    derived = build_policy(SchedulerConfig(), NODES).inner
    shape = derived.config_document()  # type: ignore[attr-defined]
    merged = merge_document({"userLimits": {"default": {"maxGpusPerUser": 2}}}, SchedulerConfig(), shape)
    assert merged.hived is None
    assert merged.user_limits == {"default": VcUserLimit(2)}
    with pytest.raises(ReconfigurationError, match="userLimits: VC"):
        merge_document({"userLimits": {"a": {"maxGpusPerUser": 2}}}, SchedulerConfig(), shape)
