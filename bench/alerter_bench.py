"""How long one evaluation of the built-in alerting rules takes as the number of series grows.

Run: .venv/bin/python bench/alerter_bench.py
A cluster of N tasks sends task_cpu_percent, task_mem_usage_byte and task_gpu_percent for each
task; a tenth of the tasks are under-utilised so alerts fire, group and notify.
"""

from __future__ import annotations

import time

from libs.alerting.defaults import default_config
from services.alerter.core.engine import AlertEngine
from services.alerter.core.timing import FakeClock


def run(tasks: int) -> tuple[float, int]:
    clock = FakeClock()
    engine = AlertEngine(default_config())
    for i in range(tasks):
        labels = {"job_id": f"job{i // 8}", "role": "worker", "index": str(i % 8), "node_name": f"n{i // 8}"}
        engine.sample("task_cpu_percent", labels, 50.0, clock.now())
        engine.sample("task_mem_usage_byte", labels, 2e9, clock.now())
        engine.sample("task_gpu_percent", labels, 5.0 if i % 10 == 0 else 80.0, clock.now())
    engine.step(clock.now())
    clock.advance(3601)
    for i in range(tasks):  # refresh so samples do not expire
        labels = {"job_id": f"job{i // 8}", "role": "worker", "index": str(i % 8), "node_name": f"n{i // 8}"}
        engine.sample("task_gpu_percent", labels, 5.0 if i % 10 == 0 else 80.0, clock.now())
    started = time.perf_counter()
    result = engine.step(clock.now())
    return time.perf_counter() - started, len(result.fired)


if __name__ == "__main__":
    for n in (1_000, 10_000, 50_000):
        seconds, fired = run(n)
        print(f"{n:>6} tasks ({3 * n} series): one evaluation {seconds * 1000:.0f} ms, {fired} alerts fired")
