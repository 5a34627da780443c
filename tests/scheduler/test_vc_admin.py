"""VC administration in an admin's words: VCs set and removed by their GPUs (or cells, or CPU
and memory), taken from and given back to the default VC, refused naming what is free; the
config in force as the admin sees it; and VCs that survive a node change."""

from __future__ import annotations

import re
from typing import Any

import pytest

from services.scheduler.core.hived import HivedPolicy
from services.scheduler.core.placements import JobDemand, NodeInventory, Placed, TaskDemand, Waiting
from services.scheduler.core.reconfigure import (
    SchedulerConfig,
    build_policy,
    config_from_document,
    merge_document,
)
from services.scheduler.core.user_limits import UserLimitedPolicy
from services.scheduler.core.vc_admin import (
    VcChangeError,
    VcRequest,
    config_in_force,
    remove_vc,
    request_from,
    set_vc,
)
from services.scheduler.core.vc_quotas import VcQuota
from tests.scheduler.clusters import two_rack_config

CPU_ONLY = [NodeInventory("n0", "n0", 16, 65536, 0)]
TWO_GPUS = [NodeInventory("n0", "n0", 16, 65536, 2, "simulated")]
EIGHT_GPUS = [NodeInventory("n0", "n0", 16, 65536, 8, "simulated")]


def in_force(config: SchedulerConfig, nodes: list[NodeInventory]) -> tuple[UserLimitedPolicy, Any]:
    policy = build_policy(config, nodes)
    assert isinstance(policy.inner, HivedPolicy)
    return policy, policy.inner.config_document()


def vcs_of(config: SchedulerConfig, nodes: list[NodeInventory]) -> dict[str, int]:
    """GPUs each VC is guaranteed under `config` on `nodes`."""
    policy, _ = in_force(config, nodes)
    return {vc.name: vc.guaranteed_gpus for vc in policy.virtual_clusters()}


def set_on(config: SchedulerConfig, nodes: list[NodeInventory], name: str, **asked: Any) -> SchedulerConfig:
    _, cells = in_force(config, nodes)
    return set_vc(config, cells, nodes, name, VcRequest(**asked)).config


def test_vcs_are_taken_from_the_default_vc_and_a_request_that_does_not_fit_names_what_is_free() -> None:
    config = set_on(SchedulerConfig(), TWO_GPUS, "team-a", gpus=1)
    assert vcs_of(config, TWO_GPUS) == {"default": 1, "team-a": 1}
    _, cells = in_force(config, TWO_GPUS)
    with pytest.raises(VcChangeError) as refused:
        set_vc(config, cells, TWO_GPUS, "team-b", VcRequest(gpus=2))
    assert str(refused.value) == (
        "VC team-b cannot get 2 GPUs; it may have at most 1: its own 0, the 1 of VC default (which gives "
        "what the other VCs leave) and 0 in no VC. Other VCs hold: team-a 1. Make room first with "
        "`pai vc set OTHER --gpus N` or `pai vc remove OTHER`"
    )
    config = set_on(config, TWO_GPUS, "team-b", gpus=1)
    assert vcs_of(config, TWO_GPUS) == {"default": 0, "team-a": 1, "team-b": 1}
    config = set_on(config, TWO_GPUS, "team-a", gpus=0)
    assert vcs_of(config, TWO_GPUS) == {"default": 1, "team-a": 0, "team-b": 1}
    _, cells = in_force(config, TWO_GPUS)
    removed = remove_vc(config, cells, "team-b")
    assert removed.message == "VC team-b was removed; its 1 GPU went to VC default"
    assert vcs_of(removed.config, TWO_GPUS) == {"default": 2, "team-a": 0}


def test_gpus_are_carved_into_the_fewest_cells() -> None:
    config = set_on(SchedulerConfig(), EIGHT_GPUS, "team", gpus=5)
    _, cells = in_force(config, EIGHT_GPUS)
    assert cells["virtualClusters"]["team"]["virtualCells"] == [
        {"cellType": "simulated-NODE8.simulated-4GPU", "cellNumber": 1},
        {"cellType": "simulated-NODE8.simulated", "cellNumber": 1},
    ]
    assert cells["virtualClusters"]["default"]["virtualCells"] == [
        {"cellType": "simulated-NODE8.simulated-2GPU", "cellNumber": 1},
        {"cellType": "simulated-NODE8.simulated", "cellNumber": 1},
    ]
    team = JobDemand("j", "u", "team", 0, (TaskDemand("w", 0, 1, 100, 4),))
    policy, _ = in_force(config, EIGHT_GPUS)
    assert isinstance(policy.decide(team), Placed), "a 4-GPU task fits the VC's 4-GPU cell"


def test_a_node_change_keeps_the_vcs_and_puts_the_new_cells_in_the_default_vc() -> None:
    # Set on a start without GPUs: a VC with a CPU and memory quota, no GPUs anywhere.
    config = set_on(SchedulerConfig(), CPU_ONLY, "team", cpu=4, memory_mb=8192)
    assert vcs_of(config, CPU_ONLY) == {"default": 0, "team": 0}
    stored = config_from_document(config.document())
    assert stored == config
    # The next start declares two GPUs: the VCs are kept, the GPUs go to the default VC.
    policy, _ = in_force(stored, TWO_GPUS)
    assert {vc.name: vc.guaranteed_gpus for vc in policy.virtual_clusters()} == {"default": 2, "team": 0}
    assert policy.inner.notes == [  # type: ignore[attr-defined]
        "the nodes have 2 simulated GPUs more than when the VCs were set (0): they went to VC default"
    ]
    assert policy.quotas == {"team": VcQuota(4, 8192)}


def test_a_config_stored_without_cells_by_an_older_version_no_longer_hides_the_gpus() -> None:
    old = {
        "hived": {
            "physicalCluster": {"cellTypes": {}, "physicalCells": []},
            "virtualClusters": {"default": {"virtualCells": []}, "team": {"virtualCells": []}},
        },
        "userLimits": {},
    }
    config = config_from_document(old)
    assert vcs_of(config, TWO_GPUS) == {"default": 2, "team": 0}


def test_the_config_in_force_sent_back_as_it_is_changes_nothing() -> None:
    config = set_on(SchedulerConfig(), EIGHT_GPUS, "team", gpus=3)
    config = set_on(config, EIGHT_GPUS, "team", cpu=4, memory_mb=4096)
    _, cells = in_force(config, EIGHT_GPUS)
    shown = config_in_force(config, cells)
    assert shown["virtualClusters"]["team"]["cpu"] == 4
    assert set(shown["physicalCluster"]["cellTypes"]) == {
        "simulated-2GPU",
        "simulated-4GPU",
        "simulated-NODE8",
    }
    again = merge_document(shown, config, cells)
    assert again == config, "the cells stay derived from the nodes, the VCs and quotas as they were"


def test_an_admins_cells_are_rewritten_for_the_vc_and_the_default_alone() -> None:
    hived = two_rack_config()
    hived["virtualClusters"]["default"] = {"virtualCells": []}
    config = SchedulerConfig(hived)
    nodes = [NodeInventory(f"n{i}", f"n{i}", 32, 262144, 4, "A100") for i in range(4)]
    config = set_on(config, nodes, "b", gpus=4)
    assert vcs_of(config, nodes) == {"a": 8, "b": 4, "default": 4}
    assert config.hived is not None
    assert config.hived["virtualClusters"]["a"] == two_rack_config()["virtualClusters"]["a"]
    with pytest.raises(VcChangeError, match="VC c cannot get 8 GPUs; it may have at most 4"):
        set_on(config, nodes, "c", gpus=8)
    config = set_on(config, nodes, "c", cells={"A100-RACK.A100-2GPU": 1})
    assert vcs_of(config, nodes) == {"a": 8, "b": 4, "default": 2, "c": 2}


def test_cpu_only_vcs_get_quotas_and_jobs_wait_within_them() -> None:
    with pytest.raises(VcChangeError, match="the cluster has no GPUs; give it CPU and memory instead"):
        set_on(SchedulerConfig(), CPU_ONLY, "team", gpus=1)
    config = set_on(SchedulerConfig(), CPU_ONLY, "team", cpu=4)
    assert config.quotas == {"team": VcQuota(4, 16384)}, "memory in the same share of the nodes as CPU"
    _, cells = in_force(config, CPU_ONLY)
    with pytest.raises(VcChangeError) as refused:
        set_vc(config, cells, CPU_ONLY, "other", VcRequest(cpu=13, memory_mb=1024))
    assert (
        "the nodes offer 16 CPUs and 65536 MB, and other quotas hold team 4 CPU 16384 MB, so 12 CPU"
        in str(refused.value)
    )
    policy, _ = in_force(config, CPU_ONLY)

    def job(job_id: str, vc: str, cpu: int) -> JobDemand:
        return JobDemand(job_id, "u", vc, 0, (TaskDemand("w", 0, cpu, 1024, 0),))

    assert isinstance(policy.decide(job("t1", "team", 3)), Placed)
    waiting = policy.decide(job("t2", "team", 2))
    assert isinstance(waiting, Waiting)
    assert waiting.reason.startswith("VC team has a quota of 4 CPUs and 16384 MB memory")
    assert isinstance(policy.decide(job("d1", "default", 12)), Placed), "the rest is the default VC's"
    assert isinstance(policy.decide(job("d2", "default", 1)), Waiting)
    assert policy.vc_rooms()["team"].quota_cpu == 4
    assert policy.vc_rooms()["default"].quota_cpu == 12


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param({}, "say what the VC gets", id="nothing"),
        pytest.param({"gpus": -1}, "gpus: must be a whole number", id="negative"),
        pytest.param({"gpus": 1, "cells": {"x": 1}}, "give gpus or cells, not both", id="both"),
        pytest.param({"gpu": 1}, "unknown field(s) ['gpu']", id="typo"),
    ],
)
def test_a_bad_request_names_its_field(body: dict[str, Any], message: str) -> None:
    with pytest.raises(VcChangeError, match=re.escape(message)):
        request_from(body)


def test_the_default_vc_is_neither_resized_nor_removed_and_names_are_checked() -> None:
    _, cells = in_force(SchedulerConfig(), TWO_GPUS)
    with pytest.raises(VcChangeError, match="resize the others"):
        set_vc(SchedulerConfig(), cells, TWO_GPUS, "default", VcRequest(gpus=1))
    with pytest.raises(VcChangeError, match="cannot be removed"):
        remove_vc(SchedulerConfig(), cells, "default")
    with pytest.raises(VcChangeError, match="cannot name a VC"):
        set_vc(SchedulerConfig(), cells, TWO_GPUS, "config", VcRequest(gpus=1))
    with pytest.raises(VcChangeError, match="there is no VC ghost"):
        remove_vc(SchedulerConfig(), cells, "ghost")
