"""Reconfiguring a running scheduler as an admin meets it: each document form accepted, each
refused one with its whole message, and the whole account of what a new config would do to the
jobs running (killed with the devices it loses, left running without a guarantee, or safe)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from services.scheduler.core.placements import JobDemand, NodeInventory, Placed, TaskDemand, TaskPlacement
from services.scheduler.core.reconfigure import (
    Impact,
    ReconfigurationError,
    SchedulerConfig,
    build_policy,
    config_from_document,
    merge_document,
    readd_running,
)
from services.scheduler.core.user_limits import VcUserLimit, parse_user_limits
from services.scheduler.core.vc_quotas import VcQuota
from tests.scheduler.clusters import two_rack_config

NODES = [NodeInventory(f"n{i}", f"10.0.0.{i}", 32, 262144, 4, "A100") for i in range(4)]


def job(job_id: str, vc: str, *tasks: TaskDemand) -> JobDemand:
    return JobDemand(job_id, "alice", vc, 0, tasks)


def gpus(n: int, index: int = 0) -> TaskDemand:
    return TaskDemand("w", index, 1, 1024, n)


def run(config: dict[str, Any], *jobs: JobDemand) -> list[tuple[JobDemand, Placed]]:
    policy = build_policy(SchedulerConfig(config), NODES)
    out = []
    for d in jobs:
        decision = policy.decide(d)
        assert isinstance(decision, Placed), decision
        out.append((d, decision))
    return out


def impact_of(config: dict[str, Any] | None, running: Any, demoted: dict[str, str] | None = None) -> Impact:
    return readd_running(build_policy(SchedulerConfig(config), NODES), running, demoted or {})


def small_n2_config() -> dict[str, Any]:
    """Rack 0 as before for VC a; n2 now a node of 2 devices for VC b; n3 gone."""
    config = two_rack_config()
    config["physicalCluster"]["cellTypes"]["A100-SMALL"] = {
        "childCellType": "A100",
        "childCellNumber": 2,
        "isNodeLevel": True,
    }
    config["physicalCluster"]["physicalCells"][1] = {"cellType": "A100-SMALL", "cellAddress": "n2"}
    config["virtualClusters"]["b"] = {"virtualCells": [{"cellType": "A100-SMALL", "cellNumber": 1}]}
    return config


def on(node: str, *indices: int, role: str = "w", index: int = 0) -> TaskPlacement:
    return TaskPlacement(role, index, node, node, indices)


BIG = job("big", "b", gpus(4))
BIG_ON_N2 = (BIG, Placed("big", (on("n2", 0, 1, 2, 3),)))


def test_devices_a_node_no_longer_has_kill_the_job_naming_each() -> None:
    impact = impact_of(small_n2_config(), [BIG_ON_N2])
    killed = "its devices n2/GPU2, n2/GPU3 are in no cell of the new config"
    assert impact.killed == {"big": killed}
    assert impact.summary() == f"big in VC b would be killed: {killed}"
    assert not impact.safe


def test_only_gpu_tasks_lose_devices_and_every_running_job_is_judged() -> None:
    mixed = job("mixed", "a", TaskDemand("cpu", 0, 1, 1024, 0), gpus(1))
    running = [
        (mixed, Placed("mixed", (on("n3", role="cpu"), on("n0", 0)))),
        (job("a-job", "a", gpus(4)), Placed("a-job", (on("n1", 0, 1, 2, 3),))),
    ]
    impact = impact_of(small_n2_config(), running)
    assert (impact.killed, impact.downgraded, impact.safe) == ({}, {}, True)
    one = job("one", "a", gpus(1))
    lost = [
        (mixed, Placed("mixed", (on("n3", role="cpu"), on("n3", 1)))),
        (one, Placed("one", (on("n3", 0),))),
    ]
    assert impact_of(small_n2_config(), lost).killed == {
        "mixed": "its devices n3/GPU1 are in no cell of the new config",
        "one": "its devices n3/GPU0 are in no cell of the new config",
    }


def test_a_job_killed_and_a_job_downgraded_are_both_told() -> None:
    running = [
        BIG_ON_N2,
        (job("one", "a", gpus(4)), Placed("one", (on("n0", 0, 1, 2, 3),))),
        (job("two", "a", gpus(4)), Placed("two", (on("n1", 0, 1, 2, 3),))),
    ]
    smaller = small_n2_config()
    smaller["virtualClusters"]["a"]["virtualCells"][0]["cellNumber"] = 1
    impact = impact_of(smaller, running)
    assert list(impact.killed) == ["big"]
    demoted = (
        "left running without its VC guarantee (preemptible): its devices no longer fit VC a as configured"
    )
    assert impact.downgraded == {"two": demoted}
    assert impact.summary() == (
        "big in VC b would be killed: its devices n2/GPU2, n2/GPU3 are in no cell of the new config; "
        f"two in VC a would be {demoted}"
    )
    assert impact_of(smaller, running[1:], {"two": "already demoted"}).safe


def test_a_config_with_no_gpu_cells_kills_every_gpu_job() -> None:
    running = run(two_rack_config(), job("one", "a", gpus(1)))
    policy = build_policy(SchedulerConfig(), [NodeInventory("cpu", "10.0.0.9", 8, 8192, 0)])
    impact = readd_running(policy, running, {})
    assert impact.killed == {"one": "its devices n0/GPU0 are in no cell of the new config"}


def test_a_placement_that_cannot_be_re_added_kills_the_job_saying_why() -> None:
    share = job("share", "a", TaskDemand("s", 0, 1, 1024, 1, gpu_milli=500))
    bare = Placed("share", (TaskPlacement("s", 0, "n0", "n0", ()),))
    impact = impact_of(two_rack_config(), [(share, bare)])
    assert impact.killed == {"share": "its allocation cannot be re-added (tuple index out of range)"}


def test_the_hivedscheduler_layout_is_read_with_or_without_limits() -> None:
    current = SchedulerConfig(two_rack_config(), parse_user_limits({"a": {"maxGpusPerUser": 4}}))
    layout = {"config": two_rack_config(), "userLimits": {"b": {"maxGpusPerUser": 2}}}
    merged = merge_document(layout, current, current.hived)
    assert merged == SchedulerConfig(two_rack_config(), {"b": VcUserLimit(2)})
    kept = merge_document({"config": two_rack_config()}, current, current.hived)
    assert kept == SchedulerConfig(two_rack_config(), {"a": VcUserLimit(4)})
    with pytest.raises(ReconfigurationError, match=r"unknown top-level field\(s\) \['config'\]"):
        merge_document({"config": {"virtualClusters": {}}}, current, current.hived)


def test_limits_alone_keep_the_cells_in_force() -> None:
    current = SchedulerConfig(two_rack_config())
    merged = merge_document({"userLimits": {"a": {"maxGpusPerUser": 1}}}, current, current.hived)
    assert merged == SchedulerConfig(two_rack_config(), {"a": VcUserLimit(1)})
    moved = {"physicalCluster": copy.deepcopy(two_rack_config()["physicalCluster"])}
    whole = merge_document(moved, current, current.hived)
    assert whole.hived == two_rack_config()


@pytest.mark.parametrize(
    ("doc", "current_hived", "message"),
    [
        (
            {},
            None,
            "the document must be a mapping with virtualClusters (and physicalCluster for new cells), "
            "userLimits, or both",
        ),
        (
            {"virtualClusters": []},
            two_rack_config(),
            "virtualClusters: must map at least one VC name to its virtualCells",
        ),
    ],
    ids=["empty", "no-vcs"],
)
def test_a_refused_document_says_what_to_send(doc: Any, current_hived: Any, message: str) -> None:
    with pytest.raises(ReconfigurationError) as caught:
        merge_document(doc, SchedulerConfig(current_hived), current_hived)
    assert str(caught.value) == message


def test_vcs_set_before_any_gpu_node_reported_stay_over_cells_derived_from_the_nodes() -> None:
    merged = merge_document({"virtualClusters": {"a": {"cpu": 4, "memoryMB": 4096}}}, SchedulerConfig(), None)
    assert merged.hived is None, "no cells are frozen: the GPUs of a later start still land in a VC"
    assert merged.vcs == {"a": {}}
    assert merged.declared == {}
    assert merged.quotas == {"a": VcQuota(4, 4096)}


def test_the_stored_config_is_read_back_and_a_bad_one_is_refused_naming_the_field() -> None:
    assert config_from_document({"hived": "not cells", "userLimits": None}) == SchedulerConfig()
    with pytest.raises(ReconfigurationError) as caught:
        config_from_document([])
    assert str(caught.value) == "stored scheduler config: expected a mapping with hived and userLimits"
    with pytest.raises(ReconfigurationError) as caught:
        config_from_document({"hived": None, "userLimits": {"a": 3}})
    assert str(caught.value) == "userLimits.a: must be a mapping like {maxGpusPerUser: 4}"


def test_a_new_physical_cluster_replaces_the_one_in_force() -> None:
    current = SchedulerConfig(two_rack_config())
    bigger = two_rack_config()
    bigger["physicalCluster"]["physicalCells"].append(
        {"cellType": "A100-RACK", "cellChildren": [{"cellAddress": "n4"}, {"cellAddress": "n5"}]}
    )
    merged = merge_document({"physicalCluster": bigger["physicalCluster"]}, current, current.hived)
    assert merged.hived == bigger
