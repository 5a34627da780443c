"""The monitor's metrics history: bounded ring buffers at a coarse step, answered over request/reply."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from libs.backbone.connecting import Bus
from libs.backbone.topology import ensure_topology
from libs.protocol.subjects import METRICS_HISTORY_RPC
from libs.protocol.telemetry import MetricBatch, MetricSample, metrics_subject
from services.alerter.core.timing import FakeClock
from services.monitor.core.history import MetricHistory
from services.monitor.handlers import Monitor
from services.monitor.settings import MonitorSettings
from tests.support.waiting import eventually

T0 = 1_800_000_000.0  # a multiple of 60: buckets start on it


def node_batch(cpu: float, gpus: tuple[float, ...] = ()) -> list[MetricSample]:
    samples = [
        MetricSample(name="node_cpu_usage_percent", value=cpu),
        MetricSample(name="node_memory_usage_percent", value=50.0),
    ]
    return samples + [
        MetricSample(name="gpu_utilization", labels={"minor_number": str(i)}, value=g)
        for i, g in enumerate(gpus)
    ]


def task_sample(name: str, value: float, job: str = "j1", index: int = 0) -> MetricSample:
    return MetricSample(name=name, labels={"job_id": job, "role": "worker", "index": str(index)}, value=value)


def points(answer: dict[str, object], key: str, who: str, metric: str) -> list[list[float]]:
    rows = answer[key]
    assert isinstance(rows, list)
    found = [
        r
        for r in rows
        if r.get("node", f"{r.get('role')}[{r.get('index')}]") == who and r["metric"] == metric
    ]
    assert len(found) == 1, rows
    return list(found[0]["points"])


def test_samples_in_one_step_are_averaged_and_gpus_of_a_node_make_one_line() -> None:
    history = MetricHistory(step=60, keep=3600)
    history.record("n1", node_batch(10, gpus=(20, 40)), T0 + 1)
    history.record("n1", node_batch(30, gpus=(60, 80)), T0 + 20)
    history.record("n1", node_batch(70), T0 + 61)
    answer = history.query(since=0)
    assert points(answer, "nodes", "n1", "cpu") == [[T0, 20.0], [T0 + 60, 70.0]]
    assert points(answer, "nodes", "n1", "gpu") == [[T0, 50.0]]
    assert "tasks" not in answer


def test_the_history_is_bounded_in_length_age_and_number_of_series() -> None:
    history = MetricHistory(step=60, keep=600, max_series=4)
    for minute in range(30):
        history.record("n1", node_batch(minute), T0 + 60 * minute)
    cpu = points(history.query(since=0), "nodes", "n1", "cpu")
    assert len(cpu) == 10, "keep / step points at most"
    assert cpu[-1] == [T0 + 29 * 60, 29.0]
    # A task that ended is forgotten once silent longer than `keep`.
    history.record("n1", [task_sample("task_cpu_percent", 5)], T0 + 30 * 60)
    assert history.query(since=0, job_id="j1")["tasks"]
    history.record("n1", node_batch(1), T0 + 30 * 60 + 601)
    assert history.query(since=0, job_id="j1")["tasks"] == []
    # No more than max_series: the stalest go first.
    history.record("n2", node_batch(1), T0 + 40 * 60)
    assert len(history.series) == 4
    assert {k[1] for k in history.series} == {"n1", "n2"}


def test_task_series_answer_per_job_and_since_cuts_the_past() -> None:
    history = MetricHistory(step=60, keep=3600)
    history.record(
        "n1",
        [
            task_sample("task_cpu_percent", 150),
            task_sample("task_gpu_percent", 90, index=1),
            task_sample("task_cpu_percent", 3, job="other"),
        ],
        T0,
    )
    history.record("n1", [task_sample("task_cpu_percent", 50)], T0 + 120)
    answer = history.query(since=0, job_id="j1")
    assert points(answer, "tasks", "worker[0]", "cpu") == [[T0, 150.0], [T0 + 120, 50.0]]
    assert points(answer, "tasks", "worker[1]", "gpu") == [[T0, 90.0]]
    assert "nodes" not in answer
    assert points(history.query(since=T0 + 60, job_id="j1"), "tasks", "worker[0]", "cpu") == [
        [T0 + 120, 50.0]
    ]


def test_a_history_that_could_not_hold_a_point_is_refused() -> None:
    with pytest.raises(ValueError, match="step"):
        MetricHistory(step=60, keep=30)


@pytest.fixture
async def monitor(bus: Bus) -> AsyncIterator[tuple[Monitor, FakeClock]]:
    clock = FakeClock(start=T0)
    settings = MonitorSettings(node_name="node-h", metrics_port=-1, metrics_history_step=60)
    await ensure_topology(bus.js)
    running = Monitor(bus, settings, clock=clock.now)
    await running.start()
    try:
        yield running, clock
    finally:
        await running.close()


async def test_the_monitor_keeps_every_nodes_samples_and_answers_for_one_node(
    bus: Bus, monitor: tuple[Monitor, FakeClock]
) -> None:
    running, clock = monitor
    for node, cpu in (("node-h", 12.0), ("node-x", 34.0)):
        batch = MetricBatch(node=node, samples=tuple(node_batch(cpu)))
        await bus.nc.publish(metrics_subject(node), batch.model_dump_json().encode())
    await eventually(lambda: _series(running), lambda n: n >= 4)
    reply = await bus.nc.request(
        METRICS_HISTORY_RPC, json.dumps({"since": 0, "node": "node-x"}).encode(), timeout=5
    )
    answer = json.loads(reply.data)
    assert answer["step"] == 60
    assert answer["now"] == clock.now()
    assert points(answer, "nodes", "node-x", "cpu") == [[T0, 34.0]]
    assert {r["node"] for r in answer["nodes"]} == {"node-x"}
    refused = await bus.nc.request(
        METRICS_HISTORY_RPC, json.dumps({"since": "yesterday"}).encode(), timeout=5
    )
    assert "since" in json.loads(refused.data)["error"]


async def _series(monitor: Monitor) -> int:
    return len(monitor.history.series)
