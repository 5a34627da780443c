"""The monitor service: this node's inventory, health and task metrics; the cluster's liveness.

It reports this node (`node.reported`) on start and periodically; samples the node and the
tasks running on it and publishes them on `pai.metrics.<node id>` for the alerter; serves them
to Prometheus on `/metrics`; and watches every node's reports and every service's heartbeats,
publishing `node.lost` for a node silent longer than `node_lost_after`. It also keeps a bounded
history of every node's and task's use, heard on `pai.metrics.*` (history.py), and answers
requests for it on `pai.rpc.monitor.metrics` (one monitor of the queue group answers).

Its cluster view, every node's readiness and every service's heartbeat (`pai_node_count`,
`pai_service_up` on /metrics) and the `node.lost` declarations, comes from one monitor at a
time: replicas lead it through the lease `monitor` in KV (libs/backbone/leasing.py), so a sum
over every monitor's /metrics counts each node once. The others report and sample their own
node and follow the same streams, warm: the one that takes the lease over knows every node's
last report and every declared loss. A node.lost published twice anyway (by a leader replaced
while paused) is one event: its id is derived from the silence, and JetStream keeps one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Callable
from typing import Any

import psutil
import structlog
from aiohttp import web
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError
from nats.js.api import ConsumerConfig, DeliverPolicy
from pydantic import Field

from libs.backbone.connecting import Bus, connect
from libs.backbone.consuming import subscribe_ordered
from libs.backbone.errors import TRANSIENT_ERRORS, TemporaryError
from libs.backbone.heartbeats import beat_forever
from libs.backbone.leasing import Lease, while_leading
from libs.backbone.settings import BackboneSettings
from libs.backbone.topology import LEASES, ensure_topology, publish_event
from libs.protocol import simulated_gpus
from libs.protocol.events import (
    JobCompleted,
    JobScheduled,
    NodeLost,
    NodeReported,
    TaskCompleted,
    TaskStarted,
    decode_event,
)
from libs.protocol.subjects import (
    JOB_SUBJECTS,
    JOBS_STREAM,
    METRICS_HISTORY_RPC,
    NODE_SUBJECTS,
    ROOT,
    node_token,
)
from libs.protocol.telemetry import (
    HEALTH_SUBJECTS,
    METRICS_SUBJECTS,
    Heartbeat,
    MetricBatch,
    MetricSample,
    metrics_subject,
)
from libs.web.serving import inherited_socket
from services.monitor.collecting import Collector, TaskRef
from services.monitor.exposition import SampleCollector, build_registry, metrics_app
from services.monitor.history import MetricHistory
from services.monitor.inventory import detect_resources
from services.monitor.liveness import Liveness

log = structlog.get_logger(__name__)

# A round of sampling that fails for these is tried again at the next: the bus away, a process
# gone while it was read. Anything else is a bug, and stops the service.
_SAMPLING_ERRORS: tuple[type[Exception], ...] = (*TRANSIENT_ERRORS, psutil.Error)


def _dropped(what: str, msg: Msg, exc: ValueError) -> None:
    """A message that does not decode is dropped (the next one may), but never silently."""
    log.warning(f"undecodable {what} dropped", subject=msg.subject, size=len(msg.data), error=str(exc)[:300])


# The job events the monitor follows: which task processes to sample on this node.
TASK_EVENT_TYPES = ("job.scheduled", "task.started", "task.completed", "job.completed")
# The key of the cluster view's lease in KV PAI_LEASES.
LEASE_KEY = "monitor"


class MonitorSettings(BackboneSettings):
    service_name: str = "monitor"
    node_name: str = socket.gethostname()
    # This replica's name in the cluster view's lease.
    instance: str = socket.gethostname()
    node_address: str = "127.0.0.1"
    report_every: float = 15.0
    cpu_overcommit: float = Field(default=1.0, gt=0)
    memory_overcommit: float = Field(default=1.0, gt=0)
    # What an admin declares the node offers, in place of the machine less the reserve.
    node_cpus: int | None = Field(default=None, ge=1)
    node_memory_mb: int | None = Field(default=None, ge=64)
    # What the platform keeps of the machine (libs/protocol/capacity.py has the defaults).
    reserve_cpus: float | None = Field(default=None, ge=0)
    reserve_memory_mb: int | None = Field(default=None, ge=0)
    metrics_port: int = 9102  # 0: any free port; -1: no Prometheus endpoint
    # A listening socket inherited from the supervisor, served instead of the port (`pai up`
    # holds the metrics port while the monitor restarts; libs/web/serving.py).
    metrics_fd: int | None = None
    metrics_every: float = 15.0
    node_lost_after: float = 60.0
    service_down_after: float = 30.0
    heartbeat_every: float = 5.0
    # `N` or `N:MODEL`: GPUs declared on a machine that has none (`pai up --gpus`).
    simulated_gpus: str = ""
    # The metrics history: one averaged point per step (seconds), kept this many hours.
    metrics_history_step: float = 60.0
    metrics_history_hours: float = 6.0


def node_report(settings: MonitorSettings) -> NodeReported:
    simulated = simulated_gpus.from_env(value=settings.simulated_gpus)
    cpu, memory_mb, gpus, model = detect_resources(
        settings.cpu_overcommit,
        settings.memory_overcommit,
        simulated,
        declared_cpus=settings.node_cpus,
        declared_memory_mb=settings.node_memory_mb,
        reserve_cpus=settings.reserve_cpus,
        reserve_memory_mb=settings.reserve_memory_mb,
    )
    return NodeReported(
        node_id=node_token(settings.node_name),
        name=settings.node_name,
        address=settings.node_address,
        cpu=cpu,
        memory_mb=memory_mb,
        gpus=gpus,
        gpu_model=model,
    )


async def _every(seconds: float, stop: asyncio.Event) -> bool:
    """Wait ``seconds`` or until stopped; True while the loop should go on."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return not stop.is_set()


class Monitor:
    def __init__(
        self,
        bus: Bus,
        settings: MonitorSettings,
        *,
        clock: Callable[[], float] = time.time,
        leading: bool = True,
    ) -> None:
        self.bus = bus
        # Whether this monitor speaks for the cluster (node counts, services up, node.lost): a
        # monitor alone does; `main` starts its replicas as standbys and leads by the lease.
        self.leading = leading
        self.settings = settings
        self.clock = clock
        self.node_id = node_token(settings.node_name)
        self.collector = Collector()
        self.exposed = SampleCollector()
        self.registry = build_registry(self.exposed)
        self.history = MetricHistory(
            step=settings.metrics_history_step, keep=settings.metrics_history_hours * 3600
        )
        self.liveness = Liveness(settings.node_lost_after, settings.service_down_after)
        self.counts = {"node_events": 0, "job_events": 0, "heartbeats": 0}
        self.port: int | None = None
        self._subs: list[Subscription] = []
        self._runner: web.AppRunner | None = None
        self._node_samples: list[MetricSample] = []

    async def start(self) -> None:
        await ensure_topology(self.bus.js, self.settings.stream_replicas)
        nc, js = self.bus.nc, self.bus.js
        # Ordered consumers replay from the start each time: the stream is the monitor's memory.
        self._subs = [
            await nc.subscribe(HEALTH_SUBJECTS, cb=self._on_heartbeat),
            await nc.subscribe(METRICS_SUBJECTS, cb=self._on_metrics),
            await nc.subscribe(METRICS_HISTORY_RPC, queue="monitor", cb=self._on_history_request),
            await subscribe_ordered(
                js, NODE_SUBJECTS, cb=self._on_node_event, deliver_policy=DeliverPolicy.ALL
            ),
            # Only the job events that place, start or end a task on a node: a submission or a pending
            # reason (most of the stream under load) never reaches the monitor.
            await subscribe_ordered(
                js,
                JOB_SUBJECTS,
                stream=JOBS_STREAM,
                cb=self._on_job_event,
                deliver_policy=DeliverPolicy.ALL,
                config=ConsumerConfig(filter_subjects=[f"{ROOT}.job.*.{kind}" for kind in TASK_EVENT_TYPES]),
            ),
        ]
        if self.settings.metrics_fd is not None or self.settings.metrics_port >= 0:
            self._runner = web.AppRunner(metrics_app(self.registry), access_log=None)
            await self._runner.setup()
            if self.settings.metrics_fd is not None:
                await web.SockSite(self._runner, inherited_socket(self.settings.metrics_fd)).start()
            else:
                # Every interface: Prometheus scrapes from another machine.
                await web.TCPSite(self._runner, "0.0.0.0", self.settings.metrics_port).start()
            self.port = int(self._runner.addresses[0][1])
            log.info("metrics served", port=self.port)

    async def close(self) -> None:
        for sub in self._subs:
            with contextlib.suppress(NatsError):  # the connection closed first
                await sub.unsubscribe()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- inputs ---------------------------------------------------------------------------

    async def _on_heartbeat(self, msg: Msg) -> None:
        try:
            beat = Heartbeat.model_validate_json(msg.data)
        except ValueError as exc:
            _dropped("heartbeat", msg, exc)
            return
        self.liveness.service_seen(beat.service, self.clock())
        self.counts["heartbeats"] += 1

    async def _on_metrics(self, msg: Msg) -> None:
        try:
            batch = MetricBatch.model_validate_json(msg.data)
        except ValueError as exc:
            _dropped("metrics", msg, exc)
            return
        self.history.record(batch.node, batch.samples, self.clock())

    async def _on_history_request(self, msg: Msg) -> None:
        """``{"since": seconds, "node": name or null, "job_id": id or null}`` -> the history's answer."""
        reply: Any
        try:
            request = json.loads(msg.data or b"{}")
            if not isinstance(request, dict):
                raise ValueError("the request must be a JSON object")
            since, node, job_id = request.get("since", 0), request.get("node"), request.get("job_id")
            if not isinstance(since, int | float) or isinstance(since, bool):
                raise ValueError("since must be a number of seconds since the epoch")
            if not all(v is None or isinstance(v, str) for v in (node, job_id)):
                raise ValueError("node and job_id must be strings or null")
            reply = self.history.query(since=float(since), node=node, job_id=job_id)
            reply["now"] = self.clock()
        except ValueError as exc:
            reply = {"error": str(exc)}
        await msg.respond(json.dumps(reply).encode())

    async def _on_node_event(self, msg: Msg) -> None:
        try:
            event = decode_event(msg.data)
        except ValueError as exc:
            _dropped("node event", msg, exc)
            return
        if isinstance(event, NodeReported):
            self.liveness.node_seen(
                event.node_id, event.name, min(self.clock(), event.occurred_at.timestamp())
            )
        elif isinstance(event, NodeLost):
            self.liveness.lost.add(event.node_id)
        self.counts["node_events"] += 1

    async def _on_job_event(self, msg: Msg) -> None:
        try:
            event = decode_event(msg.data)
        except ValueError as exc:
            _dropped("job event", msg, exc)
            return
        if isinstance(event, TaskStarted) and event.node == self.settings.node_name and event.pid:
            self.collector.add_task(TaskRef(event.job_id, event.role, event.index, event.pid))
        elif isinstance(event, JobScheduled):
            for p in event.placements:
                if p.node == self.settings.node_name and p.gpu_milli and p.gpu_indices:
                    self.collector.set_share(event.job_id, p.role, p.index, p.gpu_indices[0], p.gpu_milli)
        elif isinstance(event, TaskCompleted):
            self.collector.remove_task(event.job_id, event.role, event.index)
        elif isinstance(event, JobCompleted):
            self.collector.remove_task(event.job_id)
        self.counts["job_events"] += 1

    # -- periodic work --------------------------------------------------------------------

    async def check_liveness(self) -> list[NodeLost]:
        """Publish node.lost for every node silent too long; returns what was published (nothing
        while another monitor leads)."""
        published: list[NodeLost] = []
        if not self.leading:
            return published
        for node_id, name, silent in self.liveness.newly_lost(self.clock()):
            seen = int(self.liveness.nodes[node_id][1])
            event = NodeLost(
                event_id=f"lost-{node_id}-{seen}",
                node_id=node_id,
                name=name,
                reason=f"no report for {silent:.0f}s (limit {self.liveness.node_lost_after:g}s)",
            )
            try:
                await publish_event(self.bus.js, event)
                published.append(event)
                log.warning("node lost", node=name, silent=round(silent))
            except TemporaryError as exc:
                self.liveness.lost.discard(node_id)  # try again next round
                log.warning("node.lost not published; will retry", node=name, error=str(exc))
        return published

    def cluster_samples(self) -> list[MetricSample]:
        """Every node's readiness and every service's heartbeat: from the leading monitor only."""
        if not self.leading:
            return []
        now = self.clock()
        samples = [
            MetricSample(
                name="pai_node_count", labels={"node_name": name, "ready": str(ready).lower()}, value=1
            )
            for name, ready in self.liveness.nodes_ready().items()
        ]
        samples += [
            MetricSample(name="pai_service_up", labels={"service": service}, value=1.0 if up else 0.0)
            for service, up in self.liveness.services_up(now).items()
        ]
        return samples

    async def sample_once(self) -> list[MetricSample]:
        """Collect this node's samples, publish them for the alerter, and expose them to Prometheus."""
        samples = await asyncio.to_thread(self.collector.collect)
        batch = MetricBatch(node=self.settings.node_name, samples=tuple(samples))
        with contextlib.suppress(*TRANSIENT_ERRORS):  # the bus away: the next sample goes instead
            await self.bus.nc.publish(metrics_subject(self.node_id), batch.model_dump_json().encode())
        here = {"node_name": self.settings.node_name}
        self._node_samples = [s.model_copy(update={"labels": s.labels | here}) for s in samples]
        self._expose()
        return samples

    def _expose(self) -> None:
        self.exposed.replace(self._node_samples + self.cluster_samples())

    async def lead(self, turn: asyncio.Event, lease: Lease) -> None:
        """Speak for the cluster until `turn` ends (the lease lost, or the monitor stopping)."""
        log.info("leading the cluster view", epoch=lease.epoch)
        self.leading = True
        self._expose()
        try:
            await turn.wait()
        finally:
            self.leading = False
            self._expose()  # at once: a sum over the monitors must not count a node twice

    async def report_forever(self, stop: asyncio.Event) -> None:
        last: dict[str, Any] | None = None
        while True:
            report = node_report(self.settings)
            try:
                await publish_event(self.bus.js, report)
                shown = report.model_dump(exclude={"event_id", "occurred_at"})
                if shown != last:
                    log.info("node reported", node=report.name, cpu=report.cpu, gpus=report.gpus)
                last = shown
            except TemporaryError as exc:
                log.warning("node report not published; will retry", error=str(exc))
            if not await _every(self.settings.report_every, stop):
                return

    async def sample_forever(self, stop: asyncio.Event) -> None:
        while True:
            try:
                await self.sample_once()
            except _SAMPLING_ERRORS:
                log.exception("sampling failed; next round will try again")
            if not await _every(self.settings.metrics_every, stop):
                return

    async def watch_forever(self, stop: asyncio.Event) -> None:
        every = max(0.5, min(5.0, self.settings.node_lost_after / 4))
        while await _every(every, stop):
            await self.check_liveness()


async def serve(monitor: Monitor, stop: asyncio.Event) -> None:
    """A started monitor's periodic work until `stop`: its node reported and sampled, and the
    cluster view whenever it holds the lease (a standby until then)."""
    leases = await monitor.bus.js.key_value(LEASES.bucket)
    # One that raises cancels the others and ends the service with its error, for its
    # supervisor to start it again.
    async with asyncio.TaskGroup() as work:
        work.create_task(monitor.report_forever(stop), name="node-report")
        work.create_task(monitor.sample_forever(stop), name="sampling")
        work.create_task(monitor.watch_forever(stop), name="liveness")
        work.create_task(
            beat_forever(monitor.bus.nc, "monitor", stop, monitor.settings.heartbeat_every), name="heartbeat"
        )
        work.create_task(
            while_leading(leases, LEASE_KEY, monitor.settings.instance, monitor.lead, stop), name="leading"
        )


async def main(settings: MonitorSettings, stop: asyncio.Event) -> None:
    async with contextlib.AsyncExitStack() as stack:  # stopped in reverse: the monitor, the bus
        bus = await connect(settings)
        stack.push_async_callback(bus.close)
        monitor = Monitor(bus, settings, leading=False)
        stack.push_async_callback(monitor.close)
        await monitor.start()
        await serve(monitor, stop)
