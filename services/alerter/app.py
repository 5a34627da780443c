"""The alerter service: feeds the engine from the bus, evaluates on a clock, delivers what is due.

Inputs: job and node events (durable consumers on PAI_JOBS and PAI_NODES), heartbeats
(`pai.health.*`) and metric samples (`pai.metrics.*`) from the monitor, and the alerting
configuration in KV, watched so a new one applies at the next evaluation. Outputs: alert.fired
and alert.resolved events, emails, webhooks and actions, and the answer to
`pai.rpc.alerter.alerts`. The clock is injected: tests move a fake one and call `tick`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import aiohttp
import nats.js.errors
import structlog
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from libs.backbone.connecting import Bus, connect
from libs.backbone.consuming import consume
from libs.backbone.errors import TemporaryError
from libs.backbone.heartbeats import beat_forever
from libs.backbone.provisioning import ConsumerSpec, ensure_consumer
from libs.backbone.settings import BackboneSettings
from libs.backbone.topology import ensure_topology, publish_event
from libs.protocol.events import AlertFired, AlertResolved, JobSubmitted, NodeReported, decode_event
from libs.protocol.subjects import ALERTS_RPC, JOBS_STREAM, NODES_STREAM, job_subject
from libs.protocol.telemetry import HEALTH_SUBJECTS, METRICS_SUBJECTS, Heartbeat, MetricBatch
from services.alerter.adapters.actions import BusActions, JobActions
from services.alerter.adapters.email import EmailSender
from services.alerter.adapters.rules_store import watch_rules
from services.alerter.adapters.webhook import WebhookSender
from services.alerter.core.config import AlertConfig
from services.alerter.core.dispatching import Notification
from services.alerter.core.engine import AlertEngine, StepResult
from services.alerter.core.evaluating import Alert
from services.alerter.core.timing import Clock, WallClock
from services.alerter.defaults import default_config

log = structlog.get_logger(__name__)

JOB_CONSUMER = ConsumerSpec(JOBS_STREAM, "alerter", description="job events for alert rules")
NODE_CONSUMER = ConsumerSpec(NODES_STREAM, "alerter-nodes", description="node reports for alert rules")


class AlerterSettings(BackboneSettings):
    service_name: str = "alerter"
    external_url: str = ""
    heartbeat_every: float = 5.0


class Alerter:
    def __init__(
        self,
        bus: Bus,
        *,
        config: AlertConfig | None = None,
        clock: Clock | None = None,
        actions: JobActions | None = None,
        external_url: str = "",
    ) -> None:
        self.bus = bus
        self.clock = clock or WallClock()
        self.engine = AlertEngine(config or default_config())
        self.bus_actions = BusActions(bus.js)
        self.actions: JobActions = actions or self.bus_actions
        self.external_url = external_url
        self.email = EmailSender()
        self.counts = {"events": 0, "heartbeats": 0, "samples": 0, "configs": 0}
        self._session: aiohttp.ClientSession | None = None
        self._subs: list[Subscription] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._watch: asyncio.Task[None] | None = None

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self, stop: asyncio.Event, *, watch: bool = True) -> None:
        await ensure_topology(self.bus.js)
        for spec in (JOB_CONSUMER, NODE_CONSUMER):
            await ensure_consumer(self.bus.js, spec)
        self._session = aiohttp.ClientSession()
        nc = self.bus.nc
        self._subs = [
            await nc.subscribe(HEALTH_SUBJECTS, cb=self._on_heartbeat),
            await nc.subscribe(METRICS_SUBJECTS, cb=self._on_metrics),
            await nc.subscribe(ALERTS_RPC, cb=self._on_alerts_request),
        ]
        js = self.bus.js
        self._tasks = [
            asyncio.create_task(consume(js, JOBS_STREAM, JOB_CONSUMER.durable, self._on_event, stop=stop)),
            asyncio.create_task(consume(js, NODES_STREAM, NODE_CONSUMER.durable, self._on_event, stop=stop)),
        ]
        if watch:
            self._watch = asyncio.create_task(self._watch_rules())
        await nc.flush()

    async def close(self) -> None:
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        # Consumers end by themselves once `stop` is set (in-flight messages are settled first).
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5.0)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def run(self, stop: asyncio.Event) -> None:
        """Evaluate every `evaluation_interval` (read again each time: it may change) until stopped."""
        while not stop.is_set():
            await self.tick()
            # Wake for the next evaluation, or sooner when a group's wait or interval ends.
            pause = self.engine.config.settings.evaluation_interval
            due = self.engine.dispatcher.next_due()
            if due is not None:
                pause = max(0.05, min(pause, due - self.clock.now()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), pause)

    # -- inputs ---------------------------------------------------------------------------

    async def _on_event(self, msg: Msg) -> None:
        event = decode_event(msg.data)
        if isinstance(event, NodeReported):
            self.bus_actions.remember(event)
        job_id = getattr(event, "job_id", None)
        if isinstance(job_id, str) and not isinstance(event, JobSubmitted):
            await self._backfill(job_id)
        self.engine.observe(event, self.clock.now())
        self.counts["events"] += 1

    async def _backfill(self, job_id: str) -> None:
        """Learn a job submitted before this alerter started, from its job.submitted on the stream."""
        if self.engine.observer.knows(job_id):
            return
        try:
            stored = await self.bus.js.get_last_msg(JOBS_STREAM, job_subject(job_id, "job.submitted"))
        except nats.js.errors.NotFoundError:
            return
        submitted = decode_event(stored.data or b"")
        if isinstance(submitted, JobSubmitted):
            self.engine.observer.remember(submitted)

    async def _on_heartbeat(self, msg: Msg) -> None:
        try:
            beat = Heartbeat.model_validate_json(msg.data)
        except ValueError:
            log.warning("unreadable heartbeat ignored", subject=msg.subject)
            return
        self.engine.heartbeat(beat.service, self.clock.now())
        self.counts["heartbeats"] += 1

    async def _on_metrics(self, msg: Msg) -> None:
        try:
            batch = MetricBatch.model_validate_json(msg.data)
        except ValueError:
            log.warning("unreadable metric batch ignored", subject=msg.subject)
            return
        now = self.clock.now()
        for sample in batch.samples:
            self.engine.sample(sample.name, sample.labels | {"node_name": batch.node}, sample.value, now)
        self.counts["samples"] += len(batch.samples)

    async def _on_alerts_request(self, msg: Msg) -> None:
        reply: Any
        try:
            request = json.loads(msg.data or b"{}")
            if not isinstance(request, dict):
                raise ValueError("the request must be a JSON object")
            user, admin = request.get("user"), request.get("admin", False)
            if (user is not None and not isinstance(user, str)) or not isinstance(admin, bool):
                raise ValueError('send {"user": string or null, "admin": true or false}')
            reply = self.engine.firing(user=user, admin=admin, now=self.clock.now())
        except ValueError as exc:
            reply = {"error": str(exc)}
        await msg.respond(json.dumps(reply).encode())

    async def _watch_rules(self) -> None:
        async for config in watch_rules(self.bus.js):
            self.engine.set_config(config or default_config())
            self.counts["configs"] += 1
            log.info("alerting configuration applied", rules=len(self.engine.config.rules))

    # -- the cycle ------------------------------------------------------------------------

    async def tick(self) -> StepResult:
        """One evaluation at the clock's time: publish transitions, deliver notifications."""
        result = self.engine.step(self.clock.now())
        for alert in result.fired:
            await self._publish(alert, fired=True)
        for alert in result.resolved:
            await self._publish(alert, fired=False)
        for notification in result.notifications:
            await self._deliver(notification)
        return result

    async def _publish(self, alert: Alert, *, fired: bool) -> None:
        stamp = f"{alert.fingerprint}-{int(alert.starts_at * 1000)}"
        event: AlertFired | AlertResolved
        if fired:
            event = AlertFired(
                event_id=f"{stamp}-fired",
                alert_id=alert.fingerprint,
                name=alert.name,
                severity=alert.labels.get("severity", "warn"),
                labels=dict(alert.labels),
                summary=alert.annotations.get("summary", ""),
                job_id=alert.labels.get("job_id"),
            )
        else:
            event = AlertResolved(
                event_id=f"{stamp}-resolved",
                alert_id=alert.fingerprint,
                name=alert.name,
                labels=dict(alert.labels),
            )
        try:
            await publish_event(self.bus.js, event)
        except TemporaryError as exc:
            log.warning("alert event not published", alert=alert.name, error=str(exc))

    async def _deliver(self, notification: Notification) -> None:
        receiver = next((r for r in self.engine.config.receivers if r.name == notification.receiver), None)
        if receiver is None:
            log.warning("notification for an unknown receiver dropped", receiver=notification.receiver)
            return
        bound = log.bind(receiver=receiver.name, group=notification.group_key)
        for email in receiver.email_configs:
            try:
                await self.email.send(email, notification)
            except Exception as exc:
                bound.warning("alert email failed", error=f"{type(exc).__name__}: {exc}")
        for hook in receiver.webhook_configs:
            try:
                assert self._session is not None, "start() creates the HTTP session"
                await WebhookSender(self._session, external_url=self.external_url).send(hook, notification)
            except Exception as exc:
                bound.warning("alert webhook failed", url=hook.url, error=f"{type(exc).__name__}: {exc}")
        for action in receiver.actions:
            for alert in notification.firing:
                try:
                    await self._act(action.action, action.tag, alert)
                except Exception as exc:
                    bound.warning(
                        "alert action failed", action=action.action, error=f"{type(exc).__name__}: {exc}"
                    )

    async def _act(self, action: str, tag: str | None, alert: Alert) -> None:
        reason = alert.annotations.get("summary") or alert.name
        job_id, node = alert.labels.get("job_id"), alert.labels.get("node_name")
        if action == "stop_job" and job_id:
            await self.actions.stop_job(job_id, alert_id=alert.fingerprint, reason=reason)
        elif action == "tag_job" and job_id and tag:
            await self.actions.tag_job(job_id, tag, alert_id=alert.fingerprint)
        elif action == "cordon_node" and node:
            await self.actions.cordon_node(node, alert_id=alert.fingerprint, reason=reason)
        else:
            log.warning("alert has no label the action needs", action=action, alert=alert.name)


async def main(settings: AlerterSettings, stop: asyncio.Event) -> None:
    bus = await connect(settings)
    alerter = Alerter(bus, external_url=settings.external_url)
    try:
        await alerter.start(stop)
        beating = asyncio.create_task(beat_forever(bus.nc, "alerter", stop, settings.heartbeat_every))
        await alerter.run(stop)
        await beating
    finally:
        await alerter.close()
        await bus.close()
