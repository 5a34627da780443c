"""Prometheus exposition of what the monitor knows, on an HTTP port of its own (`/metrics`).

The latest samples are held as they were collected and turned into gauges only when scraped,
so a task that ended disappears from the next scrape instead of lingering as a stale series.
Metric names follow OpenPAI's exporters where one exists (task_cpu_percent, task_mem_usage_byte,
task_gpu_percent, gpu_utilization, nvidiasmi_ecc_error_count, pai_node_count), so its Grafana
dashboards and alert rules read ours.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from libs.protocol.telemetry import MetricSample
from libs.web.serving import inherited_socket

HELP = {
    "task_cpu_percent": "CPU use of a task's processes, percent of one core",
    "task_mem_usage_byte": "resident memory of a task's processes",
    "task_gpu_percent": "utilisation of the GPUs a task uses",
    "task_gpu_mem_usage_byte": "GPU memory a task's processes use",
    "task_gpu_share_milli": "thousandths of one GPU (minor_number) a task sharing it holds",
    "gpu_share_allocated_milli": "thousandths of a shared GPU its running tasks hold",
    "gpu_share_tasks": "running tasks sharing a GPU",
    "gpu_utilization": "GPU utilisation percent",
    "gpu_mem_utilization": "GPU memory controller utilisation percent",
    "nvidiasmi_ecc_error_count": "volatile ECC errors by type (single, double)",
    "node_cpu_usage_percent": "node CPU use percent",
    "node_memory_usage_percent": "node memory use percent",
    "node_filesystem_usage_percent": "used space of a node filesystem, percent",
    "pai_node_count": "nodes by readiness, 1 per node",
    "pai_service_up": "1 while a platform service sends heartbeats, 0 once it went silent",
}


class SampleCollector(Collector):
    def __init__(self) -> None:
        self.samples: list[MetricSample] = []

    def replace(self, samples: Iterable[MetricSample]) -> None:
        self.samples = list(samples)

    def collect(self) -> Iterator[Metric]:
        families: dict[str, GaugeMetricFamily] = {}
        keys: dict[str, list[str]] = {}
        for sample in self.samples:
            if sample.name not in families:
                keys[sample.name] = sorted(sample.labels)
                families[sample.name] = GaugeMetricFamily(
                    sample.name, HELP.get(sample.name, sample.name), labels=keys[sample.name]
                )
            names = keys[sample.name]
            families[sample.name].add_metric([sample.labels.get(k, "") for k in names], sample.value)
        yield from families.values()


def build_registry(collector: SampleCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def metrics_app(registry: CollectorRegistry) -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


async def serve_metrics(
    registry: CollectorRegistry, *, port: int, fd: int | None
) -> tuple[web.AppRunner, int]:
    """Serve ``/metrics`` on the listening socket ``fd`` inherited from the supervisor, else on
    ``port`` (0: any free one) of every interface: Prometheus scrapes from another machine.
    Returns the runner, for its cleanup, and the port served."""
    runner = web.AppRunner(metrics_app(registry), access_log=None)
    await runner.setup()
    if fd is not None:
        await web.SockSite(runner, inherited_socket(fd)).start()
    else:
        await web.TCPSite(runner, "0.0.0.0", port).start()
    return runner, int(runner.addresses[0][1])
