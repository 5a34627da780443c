"""The monitor's handlers: each message it hears, by type, into its trackers; its periodic work.

Inputs are tables: `SUBJECTS` from a subject to the method that takes its messages, `NODE_EVENTS`
and `JOB_EVENTS` from an event's type to the method that takes it. What the monitor keeps is in
the core (core/liveness.py, core/history.py); what it reads of the machine and serves is in the
adapters (adapters/collecting.py, adapters/inventory.py, adapters/exposition.py).

Its cluster view, every node's readiness and every service's heartbeat (`pai_node_count`,
`pai_service_up` on /metrics) and the `node.lost` declarations, comes from one monitor at a
time: replicas lead it through the lease `monitor` in KV (app.py), so a sum over every
monitor's /metrics counts each node once. The others report and sample their own node and follow
the same streams, warm: the one that takes the lease over knows every node's last report and
every declared loss. A node.lost published twice anyway (by a leader replaced while paused) is
one event: its id is derived from the silence, and JetStream keeps one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import psutil
import structlog
from aiohttp import web
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError
from nats.js.api import ConsumerConfig, DeliverPolicy

from libs.backbone.connecting import Bus
from libs.backbone.consuming import subscribe_ordered
from libs.backbone.errors import TRANSIENT_ERRORS, TemporaryError
from libs.backbone.leasing import Lease
from libs.backbone.topology import ensure_topology, publish_event
from libs.protocol import simulated_gpus
from libs.protocol.events import (
    EventBase,
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
from services.monitor.adapters.collecting import Collector, TaskRef
from services.monitor.adapters.exposition import SampleCollector, build_registry, serve_metrics
from services.monitor.adapters.inventory import detect_resources
from services.monitor.core.cluster import cluster_samples, history_request, node_lost
from services.monitor.core.history import MetricHistory
from services.monitor.core.liveness import Liveness
from services.monitor.settings import MonitorSettings

log = structlog.get_logger(__name__)

# A round of sampling that fails for these is tried again at the next: the bus away, a process
# gone while it was read. Anything else is a bug, and stops the service.
_SAMPLING_ERRORS: tuple[type[Exception], ...] = (*TRANSIENT_ERRORS, psutil.Error)


def _dropped(what: str, msg: Msg, exc: ValueError) -> None:
    """A message that does not decode is dropped (the next one may), but never silently."""
    log.warning(f"undecodable {what} dropped", subject=msg.subject, size=len(msg.data), error=str(exc)[:300])


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
        self._subs = [
            await nc.subscribe(subject, queue=queue, cb=_bound(self, handler))
            for subject, (handler, queue) in SUBJECTS.items()
        ]
        # Ordered consumers replay from the start each time: the stream is the monitor's memory.
        self._subs += [
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
            self._runner, self.port = await serve_metrics(
                self.registry, port=self.settings.metrics_port, fd=self.settings.metrics_fd
            )
            log.info("metrics served", port=self.port)

    async def close(self) -> None:
        for sub in self._subs:
            with contextlib.suppress(NatsError):  # the connection closed first
                await sub.unsubscribe()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- inputs ---------------------------------------------------------------------------

    async def on_heartbeat(self, msg: Msg) -> None:
        try:
            beat = Heartbeat.model_validate_json(msg.data)
        except ValueError as exc:
            _dropped("heartbeat", msg, exc)
            return
        self.liveness.service_seen(beat.service, self.clock())
        self.counts["heartbeats"] += 1

    async def on_metrics(self, msg: Msg) -> None:
        try:
            batch = MetricBatch.model_validate_json(msg.data)
        except ValueError as exc:
            _dropped("metrics", msg, exc)
            return
        self.history.record(batch.node, batch.samples, self.clock())

    async def on_history_request(self, msg: Msg) -> None:
        """``{"since": seconds, "node": name or null, "job_id": id or null}`` -> the history's answer."""
        reply: Any
        try:
            since, node, job_id = history_request(msg.data)
            reply = self.history.query(since=since, node=node, job_id=job_id)
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
        handler = NODE_EVENTS.get(type(event))
        if handler is not None:
            handler(self, event)
        self.counts["node_events"] += 1

    async def _on_job_event(self, msg: Msg) -> None:
        try:
            event = decode_event(msg.data)
        except ValueError as exc:
            _dropped("job event", msg, exc)
            return
        handler = JOB_EVENTS.get(type(event))
        if handler is not None:
            handler(self, event)
        self.counts["job_events"] += 1

    def node_reported(self, event: NodeReported) -> None:
        self.liveness.node_seen(event.node_id, event.name, min(self.clock(), event.occurred_at.timestamp()))

    def node_lost(self, event: NodeLost) -> None:
        self.liveness.lost.add(event.node_id)

    def task_started(self, event: TaskStarted) -> None:
        if event.node == self.settings.node_name and event.pid:
            self.collector.add_task(TaskRef(event.job_id, event.role, event.index, event.pid))

    def job_scheduled(self, event: JobScheduled) -> None:
        for p in event.placements:
            if p.node == self.settings.node_name and p.gpu_milli and p.gpu_indices:
                self.collector.set_share(event.job_id, p.role, p.index, p.gpu_indices[0], p.gpu_milli)

    def task_completed(self, event: TaskCompleted) -> None:
        self.collector.remove_task(event.job_id, event.role, event.index)

    def job_completed(self, event: JobCompleted) -> None:
        self.collector.remove_task(event.job_id)

    # -- periodic work --------------------------------------------------------------------

    async def check_liveness(self) -> list[NodeLost]:
        """Publish node.lost for every node silent too long; returns what was published (nothing
        while another monitor leads)."""
        published: list[NodeLost] = []
        if not self.leading:
            return published
        for node_id, name, silent in self.liveness.newly_lost(self.clock()):
            event = node_lost(self.liveness, node_id, name, silent)
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
        return cluster_samples(self.liveness, self.clock())

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


def _bound(
    monitor: Monitor, handler: Callable[[Monitor, Msg], Awaitable[None]]
) -> Callable[[Msg], Awaitable[None]]:
    async def callback(msg: Msg) -> None:
        await handler(monitor, msg)

    return callback


# Core NATS subjects: the handler of their messages, and the queue group (one of them
# answers) or "" (every monitor hears).
SUBJECTS: Mapping[str, tuple[Callable[[Monitor, Msg], Awaitable[None]], str]] = {
    HEALTH_SUBJECTS: (Monitor.on_heartbeat, ""),
    METRICS_SUBJECTS: (Monitor.on_metrics, ""),
    METRICS_HISTORY_RPC: (Monitor.on_history_request, "monitor"),
}
# Node events from PAI_NODES, by type; others are counted and passed over.
NODE_EVENTS: Mapping[type[EventBase], Callable[[Monitor, Any], None]] = {
    NodeReported: Monitor.node_reported,
    NodeLost: Monitor.node_lost,
}
# The job events that place, start or end a task on a node: which task processes to sample here.
JOB_EVENTS: Mapping[type[EventBase], Callable[[Monitor, Any], None]] = {
    JobScheduled: Monitor.job_scheduled,
    TaskStarted: Monitor.task_started,
    TaskCompleted: Monitor.task_completed,
    JobCompleted: Monitor.job_completed,
}
# Their type names, which filter the consumer of PAI_JOBS.
TASK_EVENT_TYPES = ("job.scheduled", "task.started", "task.completed", "job.completed")
