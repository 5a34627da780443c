"""HiveD's own experiment on the Philly trace: is any VC served worse shared than alone?

The sharing anomaly (HiveD, OSDI 2020): a tenant waits longer on the shared cluster than it
would on a private cluster the size of its quota. For each load (arrival times divided by it)
and each quota set, `pai sim`'s code replays the Philly jobs (philly-pollux/philly.csv.gz,
jobs keep their trace VC) on Philly's 552 machines in three arms:

- hived: the shared cluster under the scheduler core, each VC's quota as node-level cells;
- private: each VC alone on its own nodes (its quota's whole nodes), under the same core;
- quota: the shared cluster under the quota baseline (per-VC GPU quotas, gang placement,
  best-fit nodes, no cells; `--borrow` lets VCs use idle GPUs beyond quota, preemptible).

Quota sets: `demand` gives the VCs GPUs in proportion to their GPU-hours in the trace;
`published` in proportion to the node counts published for Philly's VCs (HeliosArtifact's
philly_vc.csv, 352 nodes scaled to the machine list's 2,490 GPUs). VCs with fewer than
`--min-jobs` jobs are dropped, and their jobs with them (the count is printed). It prints per VC
and per job size the mean and p99 queueing delay of each arm and the anomaly (shared mean minus
private mean) of HiveD and of the baseline, then allocation and fragmentation; the last line is
JSON (`--json`: only that line).

Run: .venv/bin/python bench/hived_anomaly.py [--load 2] [--quotas demand,published] [--limit N]
     [--borrow] [--jobs 2] [--json]
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.scheduler.core.placements import NodeInventory  # noqa: E402
from services.scheduler.sim.quotas import (  # noqa: E402
    demand_by_size,
    largest_jobs,
    private_cluster,
    shared_cluster,
    split_nodes,
)
from services.scheduler.sim.simulator import SIZE_BUCKETS, simulate  # noqa: E402
from services.scheduler.sim.traces import SimPod, load_trace, read_nodes  # noqa: E402

DATA = ROOT.parent / "shared" / "anchors" / "traces"
TRACE = DATA / "philly-pollux" / "philly.csv.gz"
MACHINES = DATA / "philly_cluster_machine_list.csv"
PUBLISHED = DATA / "published-summaries" / "HeliosArtifact" / "philly_vc.csv"
VC_COLUMN = "cluster"


def trace_vcs(path: Path) -> Counter[str]:
    with gzip.open(path, "rt", newline="") as f:
        return Counter(row[VC_COLUMN] for row in csv.DictReader(f))


def demand_quotas(pods: list[SimPod], total: int) -> dict[str, int]:
    """GPUs in proportion to each VC's GPU-hours (rounded down: the sum never exceeds the cluster)."""
    hours: dict[str, float] = {}
    for p in pods:
        hours[p.vc] = hours.get(p.vc, 0.0) + p.gpus * p.duration
    whole = sum(hours.values()) or 1.0
    # At least one 2-GPU machine each (a short --limit slice gives some VCs almost nothing).
    quotas = {vc: max(2, int(total * h / whole)) for vc, h in sorted(hours.items())}
    biggest = max(quotas, key=lambda vc: quotas[vc])
    quotas[biggest] -= max(0, sum(quotas.values()) - total)
    return quotas


def published_quotas(vcs: list[str], total: int) -> dict[str, int]:
    with PUBLISHED.open(newline="") as f:
        counts = {row["vc"]: int(row["node num"]) for row in csv.DictReader(f)}
    missing = [vc for vc in vcs if vc not in counts]
    if missing:
        raise SystemExit(f"{PUBLISHED} lists no node count for VC(s) {missing}")
    whole = sum(counts[vc] for vc in vcs)
    return {vc: int(total * counts[vc] / whole) for vc in vcs}


Arm = tuple[str, str, Any, list[SimPod], bool]  # (arm, VC or "", cluster, pods, borrow)


def run_arm(arm: Arm) -> tuple[str, str, dict[str, Any]]:
    name, vc, cluster, pods, borrow = arm
    policy = "quota" if name == "quota" else "hived"
    report = simulate(cluster, pods, {}, policy, borrow)
    report.pop("allocation_over_time", None)
    return name, vc, report


def experiment(
    nodes: list[NodeInventory],
    pods: list[SimPod],
    quotas: dict[str, int],
    borrow: bool,
    jobs: int,
    shape: str = "demand",
) -> dict[str, Any]:
    demand = demand_by_size(pods) if shape == "demand" else None
    split = split_nodes(quotas, nodes, largest_jobs(pods), demand)
    shared = shared_cluster(nodes, split)
    arms: list[Arm] = [("hived", "", shared, pods, False), ("quota", "", shared, pods, borrow)]
    for vc, members in split.items():
        arms.append(("private", vc, private_cluster(vc, members), [p for p in pods if p.vc == vc], False))
    started = time.perf_counter()
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            results = list(pool.map(run_arm, arms))
    else:
        results = [run_arm(a) for a in arms]
    shared_reports = {name: r for name, vc, r in results if not vc}
    private = {vc: r for name, vc, r in results if vc}
    return summarise(split, shared_reports, private, time.perf_counter() - started)


def _delays(report: dict[str, Any], vc: str, size: str = "") -> dict[str, float]:
    q = report["queueing_delay_s"]
    if size:
        return dict(q["per_vc_size"].get(vc, {}).get(size, {})) if vc else dict(q["per_size"].get(size, {}))
    return dict(q["per_vc"].get(vc, {}))


def summarise(
    split: dict[str, list[NodeInventory]],
    shared: dict[str, dict[str, Any]],
    private: dict[str, dict[str, Any]],
    wall: float,
) -> dict[str, Any]:
    vcs: dict[str, Any] = {}
    for vc, members in split.items():
        row: dict[str, Any] = {
            "quota_gpus": sum(n.gpus for n in members),
            "nodes": dict(sorted(Counter(f"{n.gpus}gpu" for n in members).items())),
        }
        for arm, report in (("private", private[vc]), ("hived", shared["hived"]), ("quota", shared["quota"])):
            d = _delays(report, vc)
            row[arm] = {"jobs": d.get("jobs", 0), "mean_s": d.get("mean", 0.0), "p99_s": d.get("p99", 0.0)}
        for arm in ("hived", "quota"):
            row[f"anomaly_{arm}_s"] = round(row[arm]["mean_s"] - row["private"]["mean_s"], 1)
            row[f"anomaly_{arm}_p99_s"] = round(row[arm]["p99_s"] - row["private"]["p99_s"], 1)
            # The same per job size: a VC served better on the whole may still wait longer for some sizes.
            row[f"anomaly_{arm}_by_size_s"] = {
                size: round(_delays(shared[arm], vc, size).get("mean", 0.0) - d["mean"], 1)
                for size in SIZE_BUCKETS
                if (d := _delays(private[vc], vc, size))
            }
        vcs[vc] = row
    sizes: dict[str, Any] = {}
    for size in SIZE_BUCKETS:
        pooled: list[tuple[int, float, float]] = []  # (jobs, mean, p99) of each VC's private cluster
        for vc in split:
            d = _delays(private[vc], vc, size)
            if d:
                pooled.append((int(d["jobs"]), d["mean"], d["p99"]))
        n = sum(j for j, _, _ in pooled)
        if not n:
            continue
        row = {"jobs": n, "private": {"mean_s": round(sum(j * m for j, m, _ in pooled) / n, 1)}}
        # p99 over private clusters: the largest VC p99 (the runs are separate; no pooled list kept)
        row["private"]["p99_s"] = max(p for _, _, p in pooled)
        for arm in ("hived", "quota"):
            d = _delays(shared[arm], "", size)
            row[arm] = {"mean_s": d.get("mean", 0.0), "p99_s": d.get("p99", 0.0)}
            row[f"anomaly_{arm}_s"] = round(row[arm]["mean_s"] - row["private"]["mean_s"], 1)
        sizes[size] = row
    never = {arm: shared[arm]["never_started"] for arm in shared}
    never["private"] = sum(r["never_started"] for r in private.values())
    return {
        "vcs": vcs,
        "sizes": sizes,
        "never_started_by_arm": never,
        "never_started": sum(never.values()),
        "anomaly_hived_max_s": max(v["anomaly_hived_s"] for v in vcs.values()),
        "anomaly_quota_max_s": max(v["anomaly_quota_s"] for v in vcs.values()),
        "anomaly_hived_vc_size_max_s": max(max(v["anomaly_hived_by_size_s"].values()) for v in vcs.values()),
        "anomaly_quota_vc_size_max_s": max(max(v["anomaly_quota_by_size_s"].values()) for v in vcs.values()),
        "allocation": {arm: shared[arm]["gpu_allocation_rate"] for arm in shared},
        "fragmentation_mean": {arm: shared[arm]["fragmentation_mean"] for arm in shared},
        "preemptions": {arm: shared[arm]["preemptions"] for arm in shared},
        "blocked_with_room": {arm: shared[arm]["blocked_with_room"] for arm in shared},
        "gang_jobs": shared["hived"]["gang_jobs"],
        "jobs": shared["hived"]["pods"],
        "wall_s": round(wall, 1),
    }


def _m(seconds: float) -> str:
    return f"{seconds / 60:,.1f}"


def print_run(load: float, quota_set: str, shape: str, borrow: bool, r: dict[str, Any]) -> None:
    print(
        f"\n== load {load:g}, {quota_set} quotas, nodes shaped to {shape}, quota baseline "
        f"{'borrows' if borrow else 'never borrows'}"
        f" ({r['jobs']:,} jobs, {r['gang_jobs']} gangs of whole nodes; {r['wall_s']} s)"
    )
    print("queueing delay in minutes: mean / p99; anomaly = shared mean - private mean")
    print(
        f"{'VC':8} {'GPUs':>5} {'8gpu+2gpu':>9} {'jobs':>6}  {'private':>15}  {'hived':>15}  {'quota':>15}"
        f"  {'anom hived':>10} {'anom quota':>10}"
    )
    for vc, v in sorted(r["vcs"].items(), key=lambda kv: -kv[1]["quota_gpus"]):
        cells = f"{v['nodes'].get('8gpu', 0)}+{v['nodes'].get('2gpu', 0)}"
        arms = "  ".join(
            f"{_m(v[a]['mean_s']):>7}/{_m(v[a]['p99_s']):>7}" for a in ("private", "hived", "quota")
        )
        print(
            f"{vc:8} {v['quota_gpus']:>5} {cells:>9} {v['private']['jobs']:>6}  {arms}"
            f"  {_m(v['anomaly_hived_s']):>10} {_m(v['anomaly_quota_s']):>10}"
        )
    print(f"{'size':8} {'':>5} {'':>9} {'jobs':>6}")
    for size, s in r["sizes"].items():
        arms = "  ".join(
            f"{_m(s[a]['mean_s']):>7}/{_m(s[a]['p99_s']):>7}" for a in ("private", "hived", "quota")
        )
        print(
            f"{size + ' GPU':8} {'':>5} {'':>9} {s['jobs']:>6}  {arms}"
            f"  {_m(s['anomaly_hived_s']):>10} {_m(s['anomaly_quota_s']):>10}"
        )
    print(
        f"max anomaly of a VC: hived {_m(r['anomaly_hived_max_s'])} min, "
        f"quota {_m(r['anomaly_quota_max_s'])} min; of one job size in a VC: "
        f"hived {_m(r['anomaly_hived_vc_size_max_s'])} min, "
        f"quota {_m(r['anomaly_quota_vc_size_max_s'])} min; never started {r['never_started_by_arm']}"
    )
    worst = sorted(
        (
            (a, vc, size)
            for vc, v in r["vcs"].items()
            for size, a in v["anomaly_quota_by_size_s"].items()
            if a > 60
        ),
        reverse=True,
    )[:8]
    if worst:
        print(
            "quota baseline, VC and size served worse than alone: "
            + ", ".join(f"{vc} {size} GPU +{_m(a)} min" for a, vc, size in worst)
        )
    for arm in ("hived", "quota"):
        a = r["allocation"][arm]
        print(
            f"{arm}: GPU allocation mean {a['mean']:.1%} max {a['max']:.1%}, "
            f"free GPUs on partly used nodes {r['fragmentation_mean'][arm]:.1%}, "
            f"preemptions {r['preemptions'][arm]}, decisions that found quota free and no place "
            f"{r['blocked_with_room'][arm]}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--load", type=float, action="append", help="arrival-rate factor (repeatable; 1 and 2)")
    ap.add_argument("--quotas", default="demand,published", help="quota sets: demand, published or both")
    ap.add_argument("--limit", type=int, default=0, help="replay only the first N jobs to arrive (0: all)")
    ap.add_argument("--min-jobs", type=int, default=20, help="drop VCs with fewer jobs than this")
    ap.add_argument(
        "--shape",
        choices=("demand", "cluster"),
        default="demand",
        help="nodes of each VC: shaped to its jobs (demand) or the cluster's mix of 8- and 2-GPU machines",
    )
    ap.add_argument("--borrow", action="store_true", help="the quota baseline borrows idle GPUs")
    ap.add_argument("--jobs", type=int, default=1, help="arms run in this many processes")
    ap.add_argument("--json", action="store_true", help="print only the closing JSON line")
    args = ap.parse_args(argv)
    quota_sets = [q for q in args.quotas.split(",") if q]
    unknown = set(quota_sets) - {"demand", "published"}
    if unknown:
        ap.error(f"--quotas: unknown set(s) {sorted(unknown)}; choose demand, published or both")
    loads = args.load or [1.0, 2.0]
    started = time.perf_counter()
    counts = trace_vcs(TRACE)
    kept = sorted(vc for vc, n in counts.items() if n >= args.min_jobs)
    dropped = {vc: n for vc, n in sorted(counts.items()) if n < args.min_jobs}
    nodes = read_nodes(MACHINES)
    total = sum(n.gpus for n in nodes)
    if not args.json:
        print(
            f"Philly trace: {sum(counts.values()):,} jobs in {len(counts)} VCs; kept {len(kept)}, "
            f"dropped {len(dropped)} VCs of fewer than {args.min_jobs} jobs "
            f"({sum(dropped.values())} jobs: {dropped}); cluster {len(nodes)} machines, {total:,} GPUs"
        )
    runs: list[dict[str, Any]] = []
    for load in loads:
        pods, _ = load_trace(TRACE, kept, args.limit, VC_COLUMN, load, skip_unknown_vcs=True)
        for quota_set in quota_sets:
            quotas = demand_quotas(pods, total) if quota_set == "demand" else published_quotas(kept, total)
            quotas = {vc: q for vc, q in quotas.items() if any(p.vc == vc for p in pods)}
            vc_pods = [p for p in pods if p.vc in quotas]
            r = experiment(nodes, vc_pods, quotas, args.borrow, args.jobs, args.shape)
            r.update(load=load, quotas=quota_set, borrow=args.borrow, shape=args.shape)
            runs.append(r)
            if not args.json:
                print_run(load, quota_set, args.shape, args.borrow, r)
    first = runs[0]
    out = {
        "load": loads[0] if len(loads) == 1 else loads,
        "never_started": sum(r["never_started"] for r in runs),
        "anomaly_hived_max_s": max(r["anomaly_hived_max_s"] for r in runs),
        "anomaly_quota_max_s": max(r["anomaly_quota_max_s"] for r in runs),
        "borrow": args.borrow,
        "shape": args.shape,
        "anomaly_hived_vc_size_max_s": max(r["anomaly_hived_vc_size_max_s"] for r in runs),
        "anomaly_quota_vc_size_max_s": max(r["anomaly_quota_vc_size_max_s"] for r in runs),
        "vcs": first["vcs"],
        "vcs_dropped": dropped,
        "runs": runs,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
