"""The simulator replays a small trace in virtual time and reports what it promised."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from pai.cli.main import app
from services.scheduler.sim.simulator import SimError, load_cluster, load_trace, simulate
from tests.scheduler.clusters import two_rack_config

NODES = """sn,cpu_milli,memory_mib,gpu,model
g0,32000,131072,8,V100
g1,32000,131072,8,V100
c0,16000,65536,0,
"""

HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)
PODS = f"""{HEADER}
p0,4000,8192,8,1000,,LS,Running,0,100,0
p1,4000,8192,8,1000,,LS,Running,10,60,10
p2,4000,8192,8,1000,V100,LS,Running,20,50,20
p3,2000,4096,1,500,,BE,Running,30,40,30
p4,1000,1024,0,0,,LS,Running,30,90,30
"""


def _files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    return tmp_path / "nodes.csv", tmp_path / "pods.csv"


def test_queueing_allocation_and_rounding_are_reported(tmp_path: Path) -> None:
    nodes, pods = _files(tmp_path)
    cluster, vcs = load_cluster(nodes)
    trace, notes = load_trace(pods, vcs)
    report = simulate(cluster, trace, notes)
    assert report["pods"] == 5
    assert report["never_started"] == 0
    assert report["total_gpus"] == 16
    assert report["notes"]["fractional_gpu_pods_rounded_up"] == 1
    # p2 needs a whole node and waits for p1 (t=60); p3 then waits for p2 to end (t=90).
    delays = report["queueing_delay_s"]["per_vc"]["default"]
    assert (delays["mean"], delays["p99"]) == (20.0, 60.0)
    assert 0 < report["gpu_allocation_rate"]["max"] <= 1


def test_cli_prints_the_report_as_json(tmp_path: Path) -> None:
    nodes, pods = _files(tmp_path)
    result = CliRunner().invoke(app, ["sim", "--cluster", str(nodes), "--trace", str(pods), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert {
        "queueing_delay_s",
        "gpu_allocation_rate",
        "fragmentation_mean",
        "preemptions",
        "wall_time_s",
    } <= set(report)


def test_a_hived_config_works_as_the_cluster(tmp_path: Path) -> None:
    (tmp_path / "hived.yaml").write_text(yaml.safe_dump(two_rack_config()))
    _, pods = _files(tmp_path)
    cluster, vcs = load_cluster(tmp_path / "hived.yaml")
    assert vcs == ["a", "b"]
    trace, notes = load_trace(pods, vcs)
    assert simulate(cluster, trace, notes)["started"] >= 1


def test_a_trace_without_times_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bad.csv").write_text("name,num_gpu\np,1\n")
    with pytest.raises(SimError, match="columns"):
        load_trace(tmp_path / "bad.csv", ["default"])
