"""`pai sim` with the trace's own VCs: quota files, gangs of whole nodes, the quota baseline."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pai.cli.main import app
from services.scheduler.core.hived import HivedPolicy
from services.scheduler.core.placements import JobDemand, NodeInventory, Placed, Preempting, TaskDemand
from services.scheduler.sim.capacity import QuotaPolicy
from services.scheduler.sim.quotas import (
    demand_by_size,
    largest_jobs,
    private_cluster,
    read_quotas,
    shared_cluster,
    split_nodes,
)
from services.scheduler.sim.simulator import SimError, SimPod, Simulator, simulate
from services.scheduler.sim.traces import load_trace, read_nodes

MACHINES = """machineId, number of GPUs, single GPU mem
m0,8, 24GB
m1,8, 24GB
m2,2, 12GB
m3,2, 12GB
"""
JOBS = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-01 00:00:10,100.0,16,1600.0,big
2017-10-01 00:00:00,50.0,1,50.0,small
2017-10-01 00:00:20,30.0,2,60.0,small
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_jobs_keep_the_vc_of_their_column_and_arrive_faster_under_load(tmp_path: Path) -> None:
    trace = _write(tmp_path, "jobs.csv", JOBS)
    pods, _ = load_trace(trace, ["big", "small"], vc_column="cluster", load=2)
    assert [(p.vc, p.arrival, p.gpus) for p in pods] == [
        ("small", 0.0, 1),
        ("big", 5.0, 16),
        ("small", 10.0, 2),
    ]


@pytest.mark.parametrize(
    ("trace_text", "vcs", "message"),
    [
        pytest.param(JOBS, ["big"], r"VC 'small' is not in the cluster.*--skip-unknown-vcs", id="unknown-vc"),
        pytest.param(
            JOBS.replace(",small\n", ",\n", 1),
            ["big", "small"],
            r"jobs.csv:3: no VC in column cluster; fill it in",
            id="row-without-vc",
        ),
    ],
)
def test_a_trace_row_the_vcs_cannot_take_is_an_error_naming_the_line(
    tmp_path: Path, trace_text: str, vcs: list[str], message: str
) -> None:
    trace = _write(tmp_path, "jobs.csv", trace_text)
    with pytest.raises(SimError, match=message):
        load_trace(trace, vcs, vc_column="cluster")


def test_unknown_vcs_can_be_dropped_and_are_counted(tmp_path: Path) -> None:
    trace = _write(tmp_path, "jobs.csv", JOBS)
    pods, notes = load_trace(trace, ["big"], vc_column="cluster", skip_unknown_vcs=True)
    assert [p.vc for p in pods] == ["big"]
    assert notes["jobs_of_unknown_vcs_skipped"] == 2


def test_a_vc_column_the_trace_lacks_is_named(tmp_path: Path) -> None:
    trace = _write(tmp_path, "jobs.csv", JOBS)
    with pytest.raises(SimError, match=r"--vc-column 'vc' is not a column"):
        load_trace(trace, ["big"], vc_column="vc")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("vc,gpus\nbig,16\nsmall,8\n", "", id="valid"),
        pytest.param("name,count\nbig,16\n", "header vc,gpus", id="wrong-header"),
        pytest.param("vc,gpus\n,16\n", r":2: no VC name", id="row-without-vc"),
        pytest.param(
            "vc,gpus\nbig,lots\n", r":2: gpus 'lots' of VC big is not a whole number", id="not-a-number"
        ),
        pytest.param("vc,gpus\nbig,0\n", "at least 1", id="zero"),
        pytest.param("vc,gpus\nbig,8\nbig,8\n", "listed twice", id="duplicate"),
    ],
)
def test_quota_files_are_read_with_errors_saying_the_fix(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, "quotas.csv", text)
    if not message:
        assert read_quotas(path) == {"big": 16, "small": 8}
        return
    with pytest.raises(SimError, match=message):
        read_quotas(path)


def test_quotas_above_the_cluster_are_refused(tmp_path: Path) -> None:
    nodes = read_nodes(_write(tmp_path, "machines.csv", MACHINES))
    with pytest.raises(SimError, match=r"add up to 21 GPUs but the cluster has 20; lower them"):
        split_nodes({"big": 16, "small": 5}, nodes)


def test_quotas_become_whole_nodes_shaped_to_each_vcs_jobs(tmp_path: Path) -> None:
    nodes = read_nodes(_write(tmp_path, "machines.csv", MACHINES))
    pods, _ = load_trace(_write(tmp_path, "jobs.csv", JOBS), ["big", "small"], vc_column="cluster")
    split = split_nodes({"big": 16, "small": 4}, nodes, largest_jobs(pods), demand_by_size(pods))
    assert {vc: sorted(n.name for n in ns) for vc, ns in split.items()} == {
        "big": ["m0", "m1"],
        "small": ["m2", "m3"],
    }
    assert shared_cluster(nodes, split).quotas == {"big": 16, "small": 4}


@pytest.mark.parametrize("policy", ["hived", "quota"])
def test_a_job_of_more_gpus_than_a_node_runs_as_a_gang_of_whole_nodes(tmp_path: Path, policy: str) -> None:
    nodes = read_nodes(_write(tmp_path, "machines.csv", MACHINES))
    pods, notes = load_trace(_write(tmp_path, "jobs.csv", JOBS), ["big", "small"], vc_column="cluster")
    split = split_nodes({"big": 16, "small": 4}, nodes, largest_jobs(pods), demand_by_size(pods))
    cluster = shared_cluster(nodes, split)
    sim = Simulator(cluster, policy)
    big = next(p for p in pods if p.gpus == 16)
    assert sim.try_start(big, 0.0, []) is True
    placed = sim.running[big.name][2]
    assert sorted((t.node, len(t.gpu_indices)) for t in placed.tasks) == [("m0", 8), ("m1", 8)]
    report = simulate(cluster, pods, notes, policy)
    assert (report["never_started"], report["gang_jobs"]) == (0, 1)
    assert report["queueing_delay_s"]["per_size"][">8"] == {"jobs": 1, "mean": 0.0, "p50": 0.0, "p99": 0.0}


def _nodes(count: int, gpus: int = 8) -> list[NodeInventory]:
    return [NodeInventory(f"n{i}", f"n{i}", 64, 1 << 20, gpus) for i in range(count)]


def _job(job_id: str, vc: str, *sizes: int) -> JobDemand:
    tasks = tuple(TaskDemand("w", i, 0, 0, g) for i, g in enumerate(sizes))
    return JobDemand(job_id, "u", vc, 0, tasks)


@pytest.mark.parametrize("seed", range(5))
def test_the_quota_policy_never_places_beyond_a_vcs_quota(seed: int) -> None:
    rng = random.Random(seed)
    policy = QuotaPolicy({"a": 12, "b": 20})
    policy.set_nodes(_nodes(4))
    running: list[str] = []
    placed = 0
    for step in range(400):
        if running and rng.random() < 0.4:
            policy.release(running.pop(rng.randrange(len(running))))
        vc = rng.choice("ab")
        decision = policy.decide(_job(f"j{step}", vc, *rng.choice([(1,), (2,), (4,), (8,), (8, 4)])))
        if isinstance(decision, Placed):
            running.append(decision.job_id)
            placed += 1
        assert policy.used["a"] <= 12
        assert policy.used["b"] <= 20
    assert placed > 50


def test_with_borrowing_idle_gpus_are_lent_and_taken_back_for_the_owner() -> None:
    policy = QuotaPolicy({"a": 8, "b": 8}, borrow=True)
    policy.set_nodes(_nodes(2))
    assert isinstance(policy.decide(_job("a1", "a", 8)), Placed)
    assert isinstance(policy.decide(_job("a2", "a", 8)), Placed)  # b's idle node, lent
    assert policy.used["a"] == 16
    decision = policy.decide(_job("b1", "b", 8))
    assert isinstance(decision, Preempting)
    assert decision.victims == ("a2",)
    policy.release("a2")
    assert isinstance(policy.decide(_job("b1", "b", 8)), Placed)

    strict = QuotaPolicy({"a": 8, "b": 8})
    strict.set_nodes(_nodes(2))
    assert isinstance(strict.decide(_job("a1", "a", 8)), Placed)
    assert not isinstance(strict.decide(_job("a2", "a", 8)), Placed)


def test_a_job_that_fits_starts_at_the_next_completion_however_many_wait_ahead() -> None:
    nodes = _nodes(2)
    split = {"a": [nodes[0]], "b": [nodes[1]]}
    cluster = shared_cluster(nodes, split)

    def pod(name: str, vc: str, arrival: float, gpus: int, duration: float) -> SimPod:
        return SimPod(name, vc, arrival, duration, gpus, 0, 0, (), 0)

    pods = [pod("b-first", "b", 0.0, 8, 1000.0), pod("a-first", "a", 0.0, 8, 50.0)]
    pods += [pod(f"b-{i}", "b", 0.5, 8, 10.0) for i in range(200)]  # all wait for b's only node
    pods.append(pod("a-late", "a", 1.0, 1, 10.0))
    for policy in ("hived", "quota"):
        report = simulate(cluster, pods, {}, policy)
        assert report["queueing_delay_s"]["per_vc_size"]["a"]["1"]["mean"] == 49.0, policy
        assert report["never_started"] == 0


def test_the_cli_replays_with_quotas_privately_and_under_the_baseline(tmp_path: Path) -> None:
    machines = _write(tmp_path, "machines.csv", MACHINES)
    trace = _write(tmp_path, "jobs.csv", JOBS)
    quotas = _write(tmp_path, "quotas.csv", "vc,gpus\nbig,16\nsmall,4\n")
    base = ["sim", "--cluster", str(machines), "--trace", str(trace), "--vc-column", "cluster"]
    base += ["--vc-quotas", str(quotas), "--json"]
    for extra in ([], ["--policy", "quota"], ["--policy", "quota", "--borrow"]):
        result = CliRunner().invoke(app, [*base, *extra])
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        assert (report["never_started"], report["started"]) == (0, 3)
        assert set(report["queueing_delay_s"]["per_vc"]) == {"big", "small"}
    result = CliRunner().invoke(app, [*base, "--private"])
    assert result.exit_code == 0, result.output
    assert {vc: r["total_gpus"] for vc, r in json.loads(result.output).items()} == {"big": 16, "small": 4}


def test_the_cli_names_what_is_missing(tmp_path: Path) -> None:
    machines = _write(tmp_path, "machines.csv", MACHINES)
    trace = _write(tmp_path, "jobs.csv", JOBS)
    base = ["sim", "--cluster", str(machines), "--trace", str(trace)]
    result = CliRunner().invoke(app, [*base, "--policy", "quota"])
    assert result.exit_code == 2
    assert "--vc-quotas" in result.output
    quotas = _write(tmp_path, "quotas.csv", "vc,gpus\nbig,16\n")
    result = CliRunner().invoke(app, [*base, "--vc-column", "cluster", "--vc-quotas", str(quotas)])
    assert result.exit_code == 2
    assert "VC 'small' is not in the cluster" in result.output


def test_hived_serves_a_vc_as_its_private_cluster_would_where_the_quota_baseline_does_not() -> None:
    """The sharing anomaly in miniature: b's quota is free, but the baseline scattered it."""
    nodes = _nodes(2)
    split = {"a": [nodes[0]], "b": [nodes[1]]}

    def pod(name: str, vc: str, arrival: float, gpus: int, duration: float) -> SimPod:
        return SimPod(name, vc, arrival, duration, gpus, 0, 0, (), 0)

    pods = [
        pod("a1", "a", 0.0, 4, 1000.0),
        pod("b1", "b", 1.0, 4, 10.0),  # best fit puts it beside a1 under the baseline
        pod("a2", "a", 2.0, 4, 1000.0),  # then a2 takes half of the other node
        pod("b2", "b", 20.0, 8, 10.0),  # b has 8 GPUs of quota free, on no single node
    ]
    b_delay: dict[str, float] = {}
    blocked: dict[str, int] = {}
    for name, cluster, policy in (
        ("private", private_cluster("b", split["b"]), "hived"),
        ("hived", shared_cluster(nodes, split), "hived"),
        ("quota", shared_cluster(nodes, split), "quota"),
    ):
        trace = [p for p in pods if p.vc == "b"] if name == "private" else pods
        report = simulate(cluster, trace, {}, policy)
        assert report["never_started"] == 0
        b_delay[name] = report["queueing_delay_s"]["per_vc_size"]["b"]["8"]["mean"]
        blocked[name] = report["blocked_with_room"]
    assert b_delay == {"private": 0.0, "hived": 0.0, "quota": 980.0}
    assert blocked == {"private": 0, "hived": 0, "quota": 1}  # b2, with b's quota free, at t=20


def test_the_replay_drives_the_schedulers_own_policy() -> None:
    nodes = _nodes(2)
    sim = Simulator(shared_cluster(nodes, {"a": nodes}), "hived")
    assert type(sim.policy) is HivedPolicy
