"""The Grafana dashboard only charts metrics the monitor serves, so no panel is empty by design."""

from __future__ import annotations

import json
import re
from pathlib import Path

from services.monitor.adapters.exposition import HELP

DASHBOARD = Path(__file__).resolve().parents[2] / "k8s" / "grafana" / "pai-dashboard.json"
FUNCTIONS = {"count", "sum", "avg", "min", "max", "by", "or", "vector", "label_values", "rate"}


def test_every_panel_queries_metrics_the_monitor_exposes() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    assert exprs
    used = set()
    for expr in exprs:
        without_strings = re.sub(r'"[^"]*"', "", expr)
        without_groups = re.sub(r"by \([^)]*\)", "", without_strings)
        without_labels = re.sub(r"\{[^}]*\}", "", without_groups)
        names = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", without_labels)) - FUNCTIONS
        # label_values(metric, label): the second argument is a label, not a metric.
        names -= set(re.findall(r",\s*([A-Za-z_]+)\)", without_labels))
        used |= names
    assert used <= set(HELP), sorted(used - set(HELP))
    assert {"task_gpu_percent", "gpu_utilization", "pai_node_count", "pai_service_up"} <= used


def test_cluster_node_and_job_views_exist() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows == ["Cluster", "Node", "Job"]
