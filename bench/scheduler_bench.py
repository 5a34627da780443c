"""Benchmark the HiveD policy: placement decisions per second and decision latency at 80% load.

The cluster is synthetic: 1,280 nodes of 8 GPUs (10,240 GPUs) under a 4-level topology
(GPU, 4-GPU socket, 8-GPU node, 16-node rack), split into 8 VCs of 10 racks each. The cluster
is first filled to 80% with a mix of jobs (1, 2, 4, 8 GPUs and gangs of 2 or 4 whole nodes, a
tenth opportunistic); then every step releases a random job and decides a new one, so the load
stays near 80% while decisions are timed. If the Alibaba trace is present beside the repository
its full replay is timed too.

Run: .venv/bin/python bench/scheduler_bench.py [--decisions 5000] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.scheduler.core.hived import HivedPolicy  # noqa: E402
from services.scheduler.core.placements import JobDemand, NodeInventory, Placed, TaskDemand  # noqa: E402

SMALL = {"cpu": 1, "memoryMB": 64, "gpu": 0}  # each task's resources, unless a case sets its own

RACKS = 80  # --racks 784: 12,544 nodes, 100,352 GPUs
NODES_PER_RACK = 16
VCS = 8
SHAPES = [(1, 1), (2, 1), (4, 1), (8, 1), (8, 2), (8, 4)]  # (GPUs per task, tasks)
WEIGHTS = [30, 15, 15, 20, 12, 8]


def cluster(racks: int = RACKS) -> tuple[dict[str, Any], list[NodeInventory]]:
    types = {
        "SOCKET": {"childCellType": "GPU", "childCellNumber": 4},
        "NODE": {"childCellType": "SOCKET", "childCellNumber": 2, "isNodeLevel": True},
        "RACK": {"childCellType": "NODE", "childCellNumber": NODES_PER_RACK},
    }
    cells = []
    nodes = []
    for r in range(racks):
        names = [f"r{r:02d}n{n:02d}" for n in range(NODES_PER_RACK)]
        cells.append({"cellType": "RACK", "cellChildren": [{"cellAddress": n} for n in names]})
        nodes += [NodeInventory(n, n, 96, 1 << 20, 8, "GPU") for n in names]
    vcs = {f"vc{i}": {"virtualCells": [{"cellType": "RACK", "cellNumber": racks // VCS}]} for i in range(VCS)}
    return {"physicalCluster": {"cellTypes": types, "physicalCells": cells}, "virtualClusters": vcs}, nodes


def rss_mb() -> float:
    """This process's resident memory now (Linux), in MB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def demand(rng: random.Random, n: int) -> JobDemand:
    gpus, tasks = rng.choices(SHAPES, WEIGHTS)[0]
    priority = -1 if rng.random() < 0.1 else rng.choice([0, 0, 100])
    return JobDemand(
        f"job{n}",
        "bench",
        f"vc{rng.randrange(VCS)}",
        priority,
        tuple(TaskDemand("worker", i, 4, 8192, gpus) for i in range(tasks)),
    )


def fill(config: dict[str, Any], nodes: list[NodeInventory], seed: int) -> list[tuple[JobDemand, Placed]]:
    """The jobs that run once the cluster is filled to 80% as the decisions below fill it."""
    rng = random.Random(seed)
    policy = HivedPolicy(config)
    policy.set_nodes(nodes)
    total = sum(n.gpus for n in nodes)
    placed: list[tuple[JobDemand, Placed]] = []
    used = n = 0
    while used < 0.8 * total and n < 20 * total:
        d = demand(rng, n)
        n += 1
        decision = policy.decide(d)
        if isinstance(decision, Placed):
            placed.append((d, decision))
            used += sum(t.gpu for t in d.tasks)
        else:
            policy.release(d.job_id)
    return placed


async def rebuild(racks: int, seed: int) -> dict[str, Any]:
    """A restarted scheduler's rebuild from the streams of a full cluster: a real nats-server
    holding one node.reported per node and job.submitted + job.scheduled per running job; the
    time from the service's start (its HiveD cells built from the config) to caught up."""
    from libs.backbone.connecting import connect
    from libs.backbone.natsserver import EmbeddedNats
    from libs.backbone.topology import ensure_topology, publish_event
    from libs.protocol.events import JobScheduled, JobSubmitted, NodeReported
    from libs.protocol.events import TaskPlacement as EventPlacement
    from services.scheduler.core.queueing import SchedulerCore
    from services.scheduler.handlers import SchedulerService
    from tests.support.jobs import job_model

    config, nodes = cluster(racks)
    jobs = fill(config, nodes, seed)
    events: list[Any] = [
        NodeReported(
            node_id=n.name, name=n.name, address=n.address, cpu=n.cpu, memory_mb=n.memory_mb, gpus=n.gpus
        )
        for n in nodes
    ]
    for d, p in jobs:
        gpus, count = d.tasks[0].gpu, len(d.tasks)
        role = {"instances": count, "resourcePerInstance": {"cpu": 4, "memoryMB": 8192, "gpu": gpus}}
        events.append(
            JobSubmitted(
                job_id=d.job_id,
                user=d.user,
                name=d.job_id,
                virtual_cluster=d.virtual_cluster,
                priority=d.priority,
                config=job_model(name="bench", taskRoles={"worker": {"resourcePerInstance": SMALL, **role}}),
            )
        )
        placements = tuple(
            EventPlacement(
                role=t.role,
                index=t.index,
                node=t.node,
                node_address=t.node_address,
                gpu_indices=t.gpu_indices,
            )
            for t in p.tasks
        )
        events.append(JobScheduled(job_id=d.job_id, attempt=0, placements=placements))
    with tempfile.TemporaryDirectory() as tmp:
        async with EmbeddedNats(Path(tmp) / "nats") as server:
            bus = await connect(server.url)
            await ensure_topology(bus.js)
            for start in range(0, len(events), 100):
                batch = events[start : start + 100]
                await asyncio.gather(*(publish_event(bus.js, e, ack_timeout=60) for e in batch))
            began, cpu = time.perf_counter(), time.process_time()
            core = SchedulerCore(HivedPolicy(config))
            service = SchedulerService(bus, core)
            stop = asyncio.Event()
            running = asyncio.ensure_future(service.run(stop))
            deadline = time.perf_counter() + 600
            while service._catch_up or len(core.nodes) < len(nodes) or len(core.running()) < len(jobs):
                assert time.perf_counter() < deadline, "the rebuild did not catch up in 10 minutes"
                await asyncio.sleep(0.05)
            rebuilt, rebuilt_cpu = time.perf_counter() - began, time.process_time() - cpu
            restored = len(core.running())
            stop.set()
            await running
            await bus.close()
    return {
        "rebuild_nodes": len(nodes),
        "rebuild_running_jobs": len(jobs),
        "rebuild_events": len(events),
        "rebuild_s": round(rebuilt, 2),
        "rebuild_cpu_s": round(rebuilt_cpu, 2),
        "rebuild_jobs_restored": restored,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--racks", type=int, default=RACKS, help="16-node racks, a multiple of 8")
    parser.add_argument("--no-trace", action="store_true", help="skip the Alibaba trace replay")
    parser.add_argument(
        "--rebuild", action="store_true", help="time a restarted service's rebuild from the streams instead"
    )
    args = parser.parse_args()
    if args.racks % VCS:
        parser.error(
            f"--racks: {args.racks} is not a multiple of {VCS} (one share per VC); "
            f"try {args.racks // VCS * VCS + VCS}"
        )
    if args.rebuild:
        print(json.dumps(asyncio.run(rebuild(args.racks, args.seed)), indent=1))
        return
    rng = random.Random(args.seed)
    rss_before = rss_mb()
    config, nodes = cluster(args.racks)
    t0, cpu0 = time.perf_counter(), time.process_time()
    policy = HivedPolicy(config)
    policy.set_nodes(nodes)
    build_s, build_cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    rss_built = rss_mb()
    total = args.racks * NODES_PER_RACK * 8
    running: dict[str, int] = {}
    used = 0
    n = 0
    while used < 0.8 * total and n < 20 * total:
        d = demand(rng, n)
        n += 1
        decision = policy.decide(d)
        if isinstance(decision, Placed):
            running[d.job_id] = sum(t.gpu for t in d.tasks)
            used += running[d.job_id]
        else:
            policy.release(d.job_id)
    fill_load = used / total
    latencies: list[float] = []
    cpu_times: list[float] = []  # the thread's CPU time: what a machine shared with others leaves as is
    outcomes: dict[str, int] = {}
    for _ in range(args.decisions):
        if running and used >= 0.8 * total:
            victim = rng.choice(list(running))
            used -= running.pop(victim)
            policy.release(victim)
        d = demand(rng, n)
        n += 1
        start, cpu = time.perf_counter(), time.thread_time()
        decision = policy.decide(d)
        latencies.append(time.perf_counter() - start)
        cpu_times.append(time.thread_time() - cpu)
        kind = type(decision).__name__
        outcomes[kind] = outcomes.get(kind, 0) + 1
        if isinstance(decision, Placed):
            running[d.job_id] = sum(t.gpu for t in d.tasks)
            used += running[d.job_id]
        else:
            policy.release(d.job_id)
    latencies.sort()
    cpu_times.sort()
    report: dict[str, Any] = {
        "gpus": total,
        "nodes": len(nodes),
        "vcs": VCS,
        "build_s": round(build_s, 2),
        "build_cpu_s": round(build_cpu_s, 2),
        "rss_mb_built": round(rss_built, 1),
        "rss_mb_scheduler": round(rss_built - rss_before, 1),
        "rss_mb_at_end": round(rss_mb(), 1),
        "load_after_fill": round(fill_load, 3),
        "load_at_end": round(used / total, 3),
        "decisions": len(latencies),
        "decisions_per_s": round(len(latencies) / sum(latencies), 1),
        "p50_ms": round(latencies[len(latencies) // 2] * 1000, 3),
        "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 3),
        "max_ms": round(latencies[-1] * 1000, 3),
        "cpu_decisions_per_s": round(len(cpu_times) / sum(cpu_times), 1),
        "cpu_p50_ms": round(cpu_times[len(cpu_times) // 2] * 1000, 3),
        "cpu_p99_ms": round(cpu_times[int(len(cpu_times) * 0.99)] * 1000, 3),
        "outcomes": outcomes,
    }
    traces = ROOT.parent / "shared" / "anchors" / "traces" / "alibaba-gpu-v2023"
    if not args.no_trace and (traces / "openb_pod_list_default.csv").is_file():
        from services.scheduler.sim.simulator import load_cluster, load_trace, simulate

        t1 = time.perf_counter()
        sim_cluster, vcs = load_cluster(traces / "openb_node_list_all_node.csv")
        pods, notes = load_trace(traces / "openb_pod_list_default.csv", vcs)
        sim = simulate(sim_cluster, pods, notes)
        report["alibaba_trace_replay_s"] = round(time.perf_counter() - t1, 2)
        report["alibaba_pods"] = sim["pods"]
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
