"""Replay HiveD behaviour cases (the design-test layout) through the scheduler core.

A cases file holds pod specs and sections of steps (schedule, add/delete pods, mark nodes bad or
healthy, construct, restart on a new config), each schedule step with the outcome the reference
implementation produced. Replaying them is how we show the core decides as HiveD does: same kind
of outcome at every step, and the same cells wherever the reference is deterministic.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from services.scheduler.core.hived import (
    BindInfo,
    HivedAlgorithm,
    HivedConfigError,
    HivedUserError,
    PodSpec,
    ScheduleResult,
    parse_config,
)


@dataclass
class StepOutcome:
    section: str
    index: int
    op: str
    pod: str
    result: str | None
    node: str = ""
    leaf_cells: list[int] = field(default_factory=list)
    victims: list[str] = field(default_factory=list)
    reason: str = ""
    passed: bool = True
    detail: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "section": self.section,
            "index": self.index,
            "op": self.op,
            "pod": self.pod,
            "result": self.result,
            "node": self.node,
            "leafCells": self.leaf_cells,
            "victims": self.victims,
            "reason": self.reason,
        }


def expand_leaf_cells(value: Any) -> list[int]:
    """`[0, 1]`, `8-15` or `0-15` into a list of indices."""
    if isinstance(value, list):
        return [int(v) for v in value]
    text = str(value)
    if "-" in text:
        lo, hi = text.split("-", 1)
        return list(range(int(lo), int(hi) + 1))
    return [int(text)]


_HEALTH_KEY = "vc_free_cell_health_chain_"
_PATCH = re.compile(r"(\w+)\.virtualCells\[(\d+)\](?:\.(\w+))?\s*=\s*('[^']*'|\{[^}]*\}|-?\d+)")


def apply_modifications(doc: dict[str, Any], text: str) -> dict[str, Any]:
    """Apply `VC.virtualCells[i](.field)=value` edits written in a section's description."""
    doc = copy.deepcopy(doc)
    for vc, index, key, raw in _PATCH.findall(text or ""):
        if raw.startswith("{"):
            value: Any = yaml.safe_load(re.sub(r":(?=\S)", ": ", raw))
        elif raw.startswith("'"):
            value = raw.strip("'")
        else:
            value = int(raw)
        cells = doc.setdefault("virtualClusters", {}).setdefault(vc, {}).setdefault("virtualCells", [])
        while len(cells) <= int(index):
            cells.append({"cellType": "", "cellNumber": 0})
        if key:
            cells[int(index)][key] = value
        else:
            cells[int(index)] = value
    return doc


class CaseReplayer:
    """Runs the sections of one cases file in order, carrying pod placements across restarts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.folder = path.parent
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        self.design = raw.get("design_test", raw) if isinstance(raw, dict) else {}
        self.pod_specs: dict[str, dict[str, Any]] = dict(self.design.get("pod_specs") or {})
        self.bind_infos: dict[str, BindInfo] = {}
        self.specs: dict[str, PodSpec] = {}
        self.algo: HivedAlgorithm | None = None
        self.all_nodes: set[str] = set()
        self.allocated: list[str] = []

    def _load_config(self, rel: str, modifications: str = "") -> dict[str, Any]:
        doc = yaml.safe_load((self.folder / rel).read_text(encoding="utf-8"))
        return apply_modifications(doc, modifications)

    def _start(self, doc: dict[str, Any]) -> None:
        self.algo = HivedAlgorithm(parse_config(doc))
        self.all_nodes = set(self.algo.all_nodes())

    def run(self) -> list[StepOutcome]:
        outcomes: list[StepOutcome] = []
        for section in self.design.get("sections") or []:
            name = str(section.get("section", ""))
            self.algo = None
            self.allocated = []
            start_error = ""
            try:
                doc = self._load_config(
                    str(section.get("config", "")), str(section.get("config_modifications", ""))
                )
                self._start(doc)
            except (HivedConfigError, OSError, yaml.YAMLError) as err:
                start_error = str(err)
            for index, step in enumerate(section.get("steps") or []):
                outcomes.append(self._step(name, index, step, start_error))
        return outcomes

    def _spec(self, step: dict[str, Any]) -> PodSpec:
        pod = str(step.get("pod", ""))
        if "spec" in step:
            self.pod_specs[pod] = dict(step["spec"])
        if pod not in self.specs or "spec" in step:
            if pod not in self.pod_specs:
                raise HivedUserError(
                    f"pod {pod}: no spec in pod_specs and none inline (add `spec:` to the step)"
                )
            self.specs[pod] = PodSpec.from_dict(pod, self.pod_specs[pod])
        return self.specs[pod]

    def _step(self, section: str, index: int, step: dict[str, Any], start_error: str) -> StepOutcome:
        op = str(step.get("op", ""))
        pod = str(step.get("pod", step.get("node", "")))
        out = StepOutcome(section, index, op, pod, None)
        expected = step.get("observed") or {}
        try:
            if op == "construct":
                out.result = "error" if start_error else None
                out.reason = start_error
            elif self.algo is None:
                raise HivedConfigError(start_error or "no scheduler")
            elif op == "schedule":
                self._schedule(step, out)
            elif op == "restart_with_new_config_and_readd_allocated_pods":
                self._start(
                    self._load_config(str(step.get("config", "")), str(step.get("config_modifications", "")))
                )
                for name in list(self.allocated):
                    assert self.algo is not None
                    self.algo.add_allocated_pod(self.specs[name], self.bind_infos[name])
            else:
                self._other(op, step)
        except (HivedUserError, HivedConfigError) as err:
            out.result = "error"
            out.reason = str(err)
        except (KeyError, AssertionError) as err:
            out.result = "error"
            out.reason = f"internal: {err!r}"
        self._judge(out, expected, step)
        return out

    def _schedule(self, step: dict[str, Any], out: StepOutcome) -> None:
        assert self.algo is not None
        spec = self._spec(step)
        raw = step.get("suggestedNodes", "ALL")
        suggested = set(self.all_nodes) if raw in (None, "ALL") else {str(n) for n in raw}
        result: ScheduleResult = self.algo.schedule(spec, suggested, str(step.get("phase", "Preempting")))
        out.result, out.node, out.leaf_cells = result.kind, result.node, list(result.leaf_cells)
        out.victims, out.reason = list(result.victims), result.reason
        if result.bind_info is not None:
            self.bind_infos[spec.name] = result.bind_info

    def _other(self, op: str, step: dict[str, Any]) -> None:
        assert self.algo is not None
        if op == "setBadNode":
            self.algo.set_bad_node(str(step["node"]))
        elif op == "setHealthyNode":
            self.algo.set_healthy_node(str(step["node"]))
        elif op == "addAllocatedPod":
            spec = self._spec(step)
            self.algo.add_allocated_pod(spec, self.bind_infos[spec.name])
            self.allocated.append(spec.name)
        elif op == "deleteAllocatedPod":
            spec = self._spec(step)
            self.algo.delete_allocated_pod(spec, self.bind_infos[spec.name])
            if spec.name in self.allocated:
                self.allocated.remove(spec.name)
        elif op == "deleteUnallocatedPod":
            self.algo.delete_unallocated_pod(self._spec(step))
        else:
            raise HivedUserError(f"unknown op {op!r}")

    def _cell_health(self, key: str) -> dict[str, list[str]]:
        """VC cells of one chain and level as `address:Healthy|Bad:prio=N`, like the cases record."""
        chain, _, level = key.removeprefix(_HEALTH_KEY).rpartition("_level")
        out: dict[str, list[str]] = {}
        if self.algo is None:
            return out
        for vc in self.algo.cfg.vc_names:
            cells = self.algo.cfg.vc_preassigned[vc].get(chain, {}).get(int(level), [])
            if cells:
                out[vc] = [
                    f"{c.address}:{'Bad' if c.physical is not None and not c.physical.healthy else 'Healthy'}"
                    f":prio={c.priority}"
                    for c in cells
                ]
        return out

    def _judge(self, out: StepOutcome, expected: dict[str, Any], step: dict[str, Any]) -> None:
        for key, cells in step.items():
            if str(key).startswith(_HEALTH_KEY) and out.result != "error":
                got = self._cell_health(str(key))
                if got != cells:
                    out.passed = False
                    out.detail = f"VC cells expected {cells}, got {got}"
                    return
        want = str(expected.get("result", ""))
        if not want:
            out.passed = out.result != "error"
            out.detail = out.reason if not out.passed else ""
            return
        kind = {"user_error_400": "error", "panic": "error"}.get(want, want)
        if out.result != kind:
            out.passed = False
            out.detail = f"expected {kind}, got {out.result} {out.reason}".strip()
            return
        if kind == "bind":
            node = str(expected.get("node", out.node))
            cells = expand_leaf_cells(expected["leafCells"]) if "leafCells" in expected else out.leaf_cells
            if (out.node, out.leaf_cells) != (node, cells):
                out.passed = False
                out.detail = f"expected {node} {cells}, got {out.node} {out.leaf_cells}"
        elif kind == "preempt":
            allowed = {str(v) for v in expected.get("victims") or []}
            if not out.victims or not set(out.victims) <= allowed:
                out.passed = False
                out.detail = f"expected victims within {sorted(allowed)}, got {out.victims}"


def format_line(o: StepOutcome) -> str:
    what = o.result or "done"
    if o.result == "bind":
        what = f"bind {o.node} {o.leaf_cells}"
    elif o.result == "preempt":
        what = f"preempt {o.victims}"
    elif o.result in ("wait", "error"):
        what = f"{o.result} ({o.reason[:100]})"
    verdict = "matches" if o.passed else f"DIFFERS: {o.detail}"
    return f"{o.section} #{o.index} {o.op} {o.pod}: {what} — {verdict}"
