"""The FGD paper's experiment on every placement policy: unallocated GPUs at 130% arrivals.

For each trace (openb_pod_list_default, openb_pod_list_multigpu50, openb_pod_list_gpuspec33 on
openb_node_list_gpu_node) and each policy, `pai sim --inflate 1.3`'s code runs seeds 42-51; the
table prints the mean unallocated GPUs at 100% and at the end (130%) beside the FGD authors'
own results for the same runs (fgd_expected_results/analysis_allo_discrete.csv.gz). The traces
are read from the shared anchors beside the repository.

Run: .venv/bin/python bench/sharing_bench.py [--seeds 42-51] [--traces default,...] [--policies ...]
     [--jobs 2]
"""

from __future__ import annotations

import argparse
import csv
import gzip
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.scheduler.sim.inflation import InflationRun, load_demands, load_nodes, run  # noqa: E402

DATA = ROOT.parent / "shared" / "anchors" / "traces" / "alibaba-gpu-v2023"
TRACES = ("default", "multigpu50", "gpuspec33")
AUTHORS = {
    "random": "01-Random",
    "dotprod": "02-DotProd",
    "gpuclustering": "03-GpuClustering",
    "gpupacking": "04-GpuPacking",
    "bestfit": "05-BestFit",
    "fgd": "06-FGD",
}


def authors(total: int = 6212) -> dict[tuple[str, str], tuple[float, float]]:
    """(trace, policy) -> the authors' mean unallocated GPUs at 100% and at 130%."""
    path = DATA / "fgd_expected_results" / "analysis_allo_discrete.csv.gz"
    if not path.exists():
        return {}
    rows: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with gzip.open(path, "rt", newline="") as f:
        for row in csv.DictReader(f):
            key = (row["workload"].removeprefix("openb_pod_list_"), row["sc_policy"])
            rows.setdefault(key, []).append(
                ((100 - float(row["100"])) * total / 100, (100 - float(row["130"])) * total / 100)
            )
    return {k: (statistics.mean(a for a, _ in v), statistics.mean(b for _, b in v)) for k, v in rows.items()}


def one(args: tuple[str, str, int]) -> dict[str, Any]:
    trace, policy, seed = args
    nodes = load_nodes(DATA / "openb_node_list_gpu_node.csv")
    demands = load_demands(DATA / f"openb_pod_list_{trace}.csv")
    result = run(nodes, demands, InflationRun(policy, seed, 1.3))
    result["trace"] = trace
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--traces", default=",".join(TRACES))
    parser.add_argument("--policies", default="fragpack,fgd,bestfit,gpupacking,gpuclustering,dotprod,random")
    parser.add_argument("--jobs", type=int, default=2)
    opts = parser.parse_args()
    first, _, last = opts.seeds.partition("-")
    seeds = list(range(int(first), int(last or first) + 1))
    traces = opts.traces.split(",")
    policies = opts.policies.split(",")
    if not DATA.exists():
        print(f"the traces are not beside the repository ({DATA}); nothing to run", file=sys.stderr)
        return 2
    work = [(t, p, s) for p in policies for t in traces for s in seeds]
    wall = time.perf_counter()
    results = []
    with ProcessPoolExecutor(max_workers=opts.jobs) as pool:
        for r in pool.map(one, work):
            results.append(r)
            print(
                f"  {r['trace']} {r['policy']} seed {r['seed']}: {r['unallocated_gpus_at_100']} at 100%, "
                f"{r['unallocated_gpus_end']} at the end ({r['wall_time_s']} s)",
                flush=True,
            )
    theirs = authors()
    print(
        f"{len(work)} replays in {time.perf_counter() - wall:.0f} s; "
        f"replay wall time mean {statistics.mean(r['wall_time_s'] for r in results):.1f} s"
    )
    header = (
        f"{'trace':<11} {'policy':<14} {'ours@100':>9} {'ours@130':>9} {'min-max@130':>12} "
        f"{'authors@100':>12} {'authors@130':>12}"
    )
    print(header)
    print("-" * len(header))
    for t in traces:
        for p in policies:
            mine = [r for r in results if r["trace"] == t and r["policy"] == p]
            at100 = statistics.mean(r["unallocated_gpus_at_100"] for r in mine)
            end = [r["unallocated_gpus_end"] for r in mine]
            ref = theirs.get((t, AUTHORS.get(p, "")))
            ref_text = f"{ref[0]:>12.1f} {ref[1]:>12.1f}" if ref else f"{'-':>12} {'-':>12}"
            spread = f"{min(end):.0f}-{max(end):.0f}"
            print(f"{t:<11} {p:<14} {at100:>9.1f} {statistics.mean(end):>9.1f} {spread:>12} {ref_text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
