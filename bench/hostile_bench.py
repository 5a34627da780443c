"""Benchmark: what a hostile job or body costs the platform once the limits are in place.

A billion-task job reaching the scheduler (around REST's validation), deep or aliased YAML and
JSON bodies at the body limit, and what the new checks add to an ordinary submission's parse.
Each must cost a bounded, small amount of time and memory, whatever the input asks for.
Run: .venv/bin/python bench/hostile_bench.py
"""

from __future__ import annotations

import functools
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from libs.protocol import JobProtocolError, parse_job
from libs.protocol.events import JobSubmitted, NodeReported
from libs.protocol.limits import DEFAULT_BODY_BYTES, limit_problems
from libs.protocol.yamlsource import check_nesting, load_yaml
from libs.web.jsonbody import json_depth
from services.scheduler.core.hived import HivedPolicy
from services.scheduler.core.queueing import SchedulerCore
from tests.support.jobs import job_model

REPO = Path(__file__).resolve().parents[1]
JOB = (
    REPO.parent
    / "shared"
    / "anchors"
    / "openpai"
    / "jobs"
    / "pai"
    / "marketplace-v2"
    / "tensorflow-cifar10.yaml"
)


def measured(action: Callable[[], Any]) -> tuple[float, int]:
    """Seconds of one call, and the peak bytes a second call allocates (traced apart: tracing slows)."""
    started = time.perf_counter()
    action()
    elapsed = time.perf_counter() - started
    tracemalloc.start()
    try:
        action()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return elapsed, peak


def best_ms(action: Callable[[], Any], rounds: int = 200) -> float:
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(rounds):
            action()
        best = min(best, (time.perf_counter() - started) / rounds)
    return best * 1000


def scheduler_with(instances: int) -> Callable[[], Any]:
    def run() -> Any:
        core = SchedulerCore(HivedPolicy())
        core.apply(NodeReported(node_id="n", name="n", address="127.0.0.1", cpu=64, memory_mb=2**20, gpus=0))
        role = {"instances": instances, "resourcePerInstance": {"cpu": 1, "memoryMB": 64, "gpu": 0}}
        config = job_model(name="bench", taskRoles={"w": role})
        core.apply(JobSubmitted(job_id="j", user="u", name="j", virtual_cluster="default", config=config))
        return core.decide()

    return run


def refused(text: str) -> Callable[[], None]:
    def run() -> None:
        try:
            parse_job(text)
        except JobProtocolError:
            return
        raise AssertionError("the hostile job was accepted")

    return run


def main() -> None:
    for instances in (1_000_000_000, 100_000, 10_000):
        seconds, peak = measured(scheduler_with(instances))
        print(
            f"scheduler, one job of {instances:,} tasks: {seconds * 1000:.1f} ms, peak {peak / 2**20:.1f} MiB"
        )
    size = DEFAULT_BODY_BYTES
    bodies = {
        "YAML job, 1 MiB of nested [": "[" * size,
        "YAML job, 1 MiB of nested {a: ": "{a: " * (size // 4),
        "YAML job, a billion laughs": "\n".join(
            ["a: &a [" + ", ".join(["lol"] * 10) + "]"]
            + [
                f"{n}: &{n} [" + ", ".join([f"*{p}"] * 10) + "]"
                for p, n in zip("abcdefgh", "bcdefghi", strict=True)
            ]
        ),
    }
    for name, text in bodies.items():
        seconds, peak = measured(refused(text))
        print(f"{name}: refused in {seconds * 1000:.1f} ms, peak {peak / 2**20:.1f} MiB")
    for name, text in {
        "1 MiB of nested [": "[" * size,
        "1 MiB of balanced depth-100 groups": ("[" * 100 + "]" * 100) * (size // 200),
    }.items():
        seconds, peak = measured(functools.partial(json_depth, text))
        print(f"JSON depth of {name}: {seconds * 1000:.1f} ms, peak {peak / 2**20:.1f} MiB")
    text = JOB.read_text(encoding="utf-8")
    data = load_yaml(text).data
    whole = best_ms(lambda: parse_job(text))
    nesting = best_ms(lambda: check_nesting(text))
    limits = best_ms(lambda: list(limit_problems(data)))
    print(
        f"ordinary job ({len(text):,} bytes): parse_job {whole:.3f} ms, of which the depth check "
        f"{nesting:.3f} ms and the limit checks {limits:.3f} ms"
    )


if __name__ == "__main__":
    main()
