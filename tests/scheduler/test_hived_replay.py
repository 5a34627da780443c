"""The core replays HiveD's own behaviour cases step for step, and the CLI reports it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from pai.cli.main import app
from services.scheduler.sim.replay import CaseReplayer, apply_modifications, expand_leaf_cells
from tests.scheduler.clusters import two_rack_config
from tests.support.anchors import anchor, needs

CASES = anchor("hived", "cases.yaml")

needs_anchors = needs("hived", "cases.yaml")


@needs_anchors
def test_every_design_test_step_matches_the_reference() -> None:
    outcomes = CaseReplayer(CASES).run()
    failing = [f"{o.section}#{o.index} {o.op} {o.pod}: {o.detail}" for o in outcomes if not o.passed]
    assert failing == []
    schedules = [o for o in outcomes if o.op == "schedule"]
    assert len(schedules) == 68
    assert {o.result for o in schedules} == {"bind", "preempt", "wait", "error"}


@needs_anchors
def test_cli_prints_one_line_per_step_and_a_tally() -> None:
    result = CliRunner().invoke(app, ["scheduler", "replay-cases", str(CASES)])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[-1] == f"{len(lines) - 1} passed, 0 failed"
    assert "testNormalOperations #0 schedule pod1: bind 0.0.1.0 [0]" in lines[0]


@needs_anchors
def test_cli_json_lines_carry_the_step_fields() -> None:
    result = CliRunner().invoke(app, ["scheduler", "replay-cases", str(CASES), "--json"])
    assert result.exit_code == 0
    rows = [json.loads(line) for line in result.output.strip().splitlines()]
    first = rows[0]
    assert set(first) == {"section", "index", "op", "pod", "result", "node", "leafCells", "victims", "reason"}
    assert (first["result"], first["node"], first["leafCells"]) == ("bind", "0.0.1.0", [0])
    preempt = next(r for r in rows if r["result"] == "preempt")
    assert preempt["victims"]


def _write_cases(tmp_path: Path, steps: list[dict[str, object]]) -> Path:
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "small.yaml").write_text(yaml.safe_dump(two_rack_config()))
    smaller = two_rack_config()
    smaller["virtualClusters"]["a"]["virtualCells"][0]["cellNumber"] = 1
    (tmp_path / "configs" / "smaller.yaml").write_text(yaml.safe_dump(smaller))
    doc = {
        "design_test": {
            "pod_specs": {},
            "sections": [{"section": "s", "config": "configs/small.yaml", "steps": steps}],
        }
    }
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _spec(group: str, gpus: int = 4, vc: str = "a", pods: int = 1) -> dict[str, object]:
    return {
        "virtualCluster": vc,
        "priority": 1,
        "leafCellType": "A100",
        "leafCellNumber": gpus,
        "affinityGroup": {"name": group, "members": [{"podNumber": pods, "leafCellNumber": gpus}]},
    }


def test_inline_specs_and_restart_with_new_config(tmp_path: Path) -> None:
    steps: list[dict[str, object]] = [
        {
            "op": "schedule",
            "pod": "p1",
            "spec": _spec("g1"),
            "observed": {"result": "bind", "node": "n0", "leafCells": "0-3"},
        },
        {"op": "addAllocatedPod", "pod": "p1"},
        {
            "op": "schedule",
            "pod": "p2",
            "spec": _spec("g2"),
            "observed": {"result": "bind", "node": "n1", "leafCells": "0-3"},
        },
        {"op": "addAllocatedPod", "pod": "p2"},
        {"op": "restart_with_new_config_and_readd_allocated_pods", "config": "configs/smaller.yaml"},
        {
            "op": "schedule",
            "pod": "p3",
            "spec": _spec("g3", 4, "b", pods=2),
            "observed": {"result": "bind", "node": "n2"},
        },
        {"op": "schedule", "pod": "p4", "spec": _spec("g4"), "observed": {"result": "wait"}},
    ]
    outcomes = CaseReplayer(_write_cases(tmp_path, steps)).run()
    assert [o.passed for o in outcomes] == [True] * 7, [o.detail for o in outcomes]
    assert outcomes[5].result == "bind"


def test_a_differing_step_fails_the_cli(tmp_path: Path) -> None:
    steps: list[dict[str, object]] = [
        {
            "op": "schedule",
            "pod": "p1",
            "spec": _spec("g1"),
            "observed": {"result": "bind", "node": "n3", "leafCells": [0]},
        },
    ]
    result = CliRunner().invoke(app, ["scheduler", "replay-cases", str(_write_cases(tmp_path, steps))])
    assert result.exit_code == 1
    assert "DIFFERS" in result.output
    assert result.output.strip().endswith("0 passed, 1 failed")


def test_missing_cases_file_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["scheduler", "replay-cases", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "does not exist" in result.output


@pytest.mark.parametrize(
    ("text", "expected"),
    [("[1, 3]", [1, 3]), ("8-11", [8, 9, 10, 11]), ("5", [5])],
    ids=["list", "range", "single"],
)
def test_leaf_cell_notations_expand(text: str, expected: list[int]) -> None:
    assert expand_leaf_cells(yaml.safe_load(text)) == expected


def test_described_config_edits_are_applied() -> None:
    doc = apply_modifications(
        two_rack_config(),
        "config with a.virtualCells[0].cellNumber=1 and "
        "b.virtualCells[1]={cellType:'A100-RACK.A100-NODE', cellNumber:1}",
    )
    assert doc["virtualClusters"]["a"]["virtualCells"][0]["cellNumber"] == 1
    assert doc["virtualClusters"]["b"]["virtualCells"][1] == {
        "cellType": "A100-RACK.A100-NODE",
        "cellNumber": 1,
    }
