"""Benchmark: parse and validate the largest OpenPAI reference job 1,000 times.

Submissions arrive in bursts of hundreds a second, and every one is parsed and validated
before anything else happens, so this cost bounds the REST server's submit rate per core.
Run: .venv/bin/python bench/protocol_bench.py
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from libs.protocol import parse_job, render_entrypoint

REPO = Path(__file__).resolve().parents[1]
JOBS = REPO.parent / "shared" / "anchors" / "openpai" / "jobs"
ROUNDS = 1000


def main() -> None:
    candidates = [p for p in JOBS.rglob("*") if p.suffix in (".yaml", ".yml")]
    largest = max(candidates, key=lambda p: p.stat().st_size)
    text = largest.read_text(encoding="utf-8")
    job = parse_job(text)  # warm up caches and prove the job is valid
    samples = []
    started = time.perf_counter()
    for _ in range(ROUNDS):
        begin = time.perf_counter()
        parse_job(text)
        samples.append(time.perf_counter() - begin)
    total = time.perf_counter() - started
    render_started = time.perf_counter()
    for _ in range(ROUNDS):
        for role in job.task_roles:
            render_entrypoint(job, role)
    render_total = time.perf_counter() - render_started
    samples.sort()
    print(f"job: {largest.relative_to(JOBS)} ({len(text)} bytes, {len(job.task_roles)} task roles)")
    print(f"parse+validate x{ROUNDS}: {total:.3f} s total, {ROUNDS / total:.0f} jobs/s")
    mean, p50, p99 = statistics.mean(samples), samples[len(samples) // 2], samples[int(len(samples) * 0.99)]
    print(f"per job: mean {mean * 1e3:.3f} ms, p50 {p50 * 1e3:.3f} ms, p99 {p99 * 1e3:.3f} ms")
    print(f"render all entrypoints x{ROUNDS}: {render_total:.3f} s total")


if __name__ == "__main__":
    main()
