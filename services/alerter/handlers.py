"""The alerter's handlers: the bus into the engine (core/engine.py), evaluations on a clock, and
what is due delivered.

`SUBJECTS` is the table from a core NATS subject to the method that takes its messages; the
streams' events go to `on_event`.

Inputs: job and node events (PAI_JOBS and PAI_NODES read from their start, then live),
heartbeats (`pai.health.*`) and metric samples (`pai.metrics.*`) from the monitor, the
alerting configuration in KV, watched so a new one applies at the next evaluation, and the
users' registered addresses (KV `PAI_USER_CONTACTS`, written by rest), watched so job alerts
carry their owner's `user_email`. Outputs:
alert.fired and alert.resolved events, emails, webhooks and actions, and the answer to
`pai.rpc.alerter.alerts`. The clock is injected: tests move a fake one and call `tick`.

Evaluations come every `evaluation_interval`, and at once (at most every `PROMPT_SPACING`
seconds) after a job event that changed a job's state: a job's RUNNING, SUCCEEDED or FAILED is
told as its event arrives, in the order of the events, and a job of two seconds is told both
(the engine keeps each change for `status_change_keep`, so one evaluation after both still
sees both). The notification log says which were told, so a restart or a takeover tells none
again.

A restart loses nothing that matters. Before its first evaluation `start` loads the stored
configuration, the users' addresses, the notification log and the services last heard
(adapters/remembering.py), the alerts the last instance left firing (its alert.fired events),
and replays the job and node history with each event at its own time. So a job pending for
hours is that old to the rules, a group already notified is not notified again before its
repeat, a resolution is still sent, and an alert already announced is not announced again.
Actions run once per alert and group (for alerts newly notified), so neither a repeat nor a
restart asks twice; the streams' two-minute deduplication only covers a crash between an
action and its log record.

Replicas lead one at a time through the lease `alerter` in KV (app.py): only
the leader rebuilds, evaluates, answers and notifies; the standby waits for the lease and then
starts as a restarted alerter does, from what the leader logged. Each evaluation first renews
the lease (`Lease.confirm`): a leader that was paused or cut off and has been replaced finds
out there, before it notifies anything, and stops leading.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

import aiohttp
import aiosmtplib
import nats.js.errors
import structlog
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError

from libs.alerting.config import AlertConfig
from libs.alerting.defaults import default_config
from libs.backbone.connecting import Bus
from libs.backbone.errors import TRANSIENT_ERRORS, TemporaryError
from libs.backbone.leasing import Lease, LeaseLost
from libs.backbone.provisioning import ensure_kv
from libs.backbone.topology import USER_CONTACTS, ensure_topology, publish_event
from libs.protocol.events import AlertFired, AlertResolved, Event, NodeReported
from libs.protocol.subjects import (
    ALERT_RULES_RPC,
    ALERTS_RPC,
    JOB_SUBJECTS,
    JOBS_STREAM,
    NODE_SUBJECTS,
    NODES_STREAM,
    RECENT_ALERTS_RPC,
)
from libs.protocol.telemetry import HEALTH_SUBJECTS, METRICS_SUBJECTS, Heartbeat, MetricBatch
from services.alerter.adapters.actions import BusActions, JobActions
from services.alerter.adapters.contacts import ContactsWatch
from services.alerter.adapters.email import EmailSender
from services.alerter.adapters.remembering import KnownServices, NotificationLog
from services.alerter.adapters.replaying import Following, firing_alerts, follow
from services.alerter.adapters.rules_store import RulesWatch
from services.alerter.adapters.webhook import WebhookSender
from services.alerter.core.dispatching import Notification, NotifiedRecord
from services.alerter.core.engine import AlertEngine, StepResult
from services.alerter.core.evaluating import Alert
from services.alerter.core.timing import Clock, WallClock

log = structlog.get_logger(__name__)

# Durable consumers of earlier versions, which read only what came after a restart.
RETIRED_DURABLES = ((JOBS_STREAM, "alerter"), (NODES_STREAM, "alerter-nodes"))
# Seconds of certain lease a notification needs: its sending and its record in the log both land
# before the lease can pass to a successor, who reads the log when it starts.
NOTIFY_MARGIN = 2.5
# Evaluations a job's state changes bring forward come at most this often (seconds): a burst of
# jobs ending is told in a few evaluations, not one per job, each renewing the lease in KV.
PROMPT_SPACING = 0.2


DELIVERY_ERRORS: tuple[type[Exception], ...] = (
    *TRANSIENT_ERRORS,
    aiohttp.ClientError,
    aiosmtplib.SMTPException,
)
"""What a receiver that is down, refusing or slow raises: said in one warning line. Anything else
is a bug, logged with its traceback; either way the other receivers are still served."""


class Alerter:
    def __init__(
        self,
        bus: Bus,
        *,
        config: AlertConfig | None = None,
        clock: Clock | None = None,
        actions: JobActions | None = None,
        external_url: str = "",
        remember_every: float = 5.0,
        lease: Lease | None = None,
    ) -> None:
        self.bus = bus
        # The lease this alerter leads by (None: it is the only one): renewed before each evaluation.
        self.lease = lease
        # Set when notifications due were not sent for want of a lease that surely lasts: the
        # turn ends, and the rebuild that follows sends them.
        self.handing_over = False
        self.clock = clock or WallClock()
        self.contacts = ContactsWatch(lambda: ensure_kv(bus.js, USER_CONTACTS))
        self.engine = AlertEngine(config or default_config(), contacts=self.contacts.emails)
        self.bus_actions = BusActions(bus.js)
        self.actions: JobActions = actions or self.bus_actions
        self.external_url = external_url
        self.email = EmailSender()
        self.remember_every = remember_every
        # Set by a live job event that changed a job's state: evaluate now, not at the next tick.
        self._prompt = asyncio.Event()
        self.counts = {
            "events": 0,
            "replayed": 0,
            "heartbeats": 0,
            "samples": 0,
            "configs": 0,
            "evaluations": 0,
        }
        self._session: aiohttp.ClientSession | None = None
        self._subs: list[Subscription] = []
        self._follows: list[Following] = []
        self._rules: RulesWatch | None = None
        self._watch: asyncio.Task[None] | None = None
        self._contacts: asyncio.Task[None] | None = None
        self._nflog: NotificationLog | None = None
        self._services: KnownServices | None = None
        self._stack = contextlib.AsyncExitStack()
        self._tasks: asyncio.TaskGroup | None = None

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self, stop: asyncio.Event, *, watch: bool = True, provision: bool = True) -> None:
        """Rebuild what the last instance knew, then follow the bus; returns once caught up.

        `provision=False`: the streams and buckets were provisioned already (by `main`, before
        this replica stood by), so a takeover does not wait for it."""
        js = self.bus.js
        if provision:
            await ensure_topology(js)
        await self._retire_durables()
        # The watches run in a task group that `close` ends: one that raises cancels the
        # alerter's turn, and `close` raises its error, which stops the service.
        self._tasks = await self._stack.enter_async_context(asyncio.TaskGroup())
        self._session = aiohttp.ClientSession()
        if watch:
            self._rules = RulesWatch(js, self._apply_config)
            stored = await self._rules.load()
            if stored is not None:
                self.engine.set_config(stored)
                self.engine.stored_config = True
        self._nflog = await NotificationLog.open(js)
        self._services = await KnownServices.open(js, every=self.remember_every)
        now = self.clock.now()
        known = await self._services.load()
        for service, heard in known.items():
            self.engine.heartbeat(service, min(heard, now))
        records = await self._nflog.load()
        firing = await firing_alerts(js)
        # The addresses before the history: a replayed alert must get the labels it fired with.
        self._contacts = self._tasks.create_task(self.contacts.run(), name="contacts")
        await _first([self.contacts.ready.wait(), stop.wait()])
        nc = self.bus.nc
        self._subs = [
            await nc.subscribe(subject, cb=functools.partial(handler, self))
            for subject, handler in SUBJECTS.items()
        ]
        self._follows = [
            await follow(js, NODES_STREAM, NODE_SUBJECTS, self.on_event),
            await follow(js, JOBS_STREAM, JOB_SUBJECTS, self.on_event),
        ]
        for following in self._follows:  # the history first: no rule may judge half of it
            await _first([following.caught_up.wait(), stop.wait()])
        # The grace for alerts left firing starts now that the history is in.
        self.engine.restore(records=records, firing=firing, now=self.clock.now())
        log.info(
            "alerter state rebuilt",
            events=self.counts["replayed"],
            records=len(records),
            firing=len(firing),
            services=len(known),
            contacts=len(self.contacts.emails),
        )
        if self._rules is not None:
            self._watch = self._tasks.create_task(self._rules.run(), name="alert-rules")
        await nc.flush()

    async def _retire_durables(self) -> None:
        for stream, durable in RETIRED_DURABLES:
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await self.bus.js.delete_consumer(stream, durable)
                log.info("durable consumer of an earlier version removed", stream=stream, durable=durable)

    async def close(self) -> None:
        for sub in [*self._subs, *(f.subscription for f in self._follows)]:
            with contextlib.suppress(NatsError):  # the connection closed first
                await sub.unsubscribe()
        if self._rules is not None:
            await self._rules.close()  # ends the watch by stopping it, not by a cancel
        await self.contacts.close()
        try:
            for task in (self._watch, self._contacts):
                if task is not None:
                    await asyncio.wait([task], timeout=5.0)
                    task.cancel()  # a cancelled watch is no error; one that raised is
            await self._stack.aclose()  # the task group: a watch's error is raised here
        finally:
            if self._services is not None:
                try:
                    await self._services.flush()
                except TRANSIENT_ERRORS as exc:
                    log.warning("last heartbeat times not stored", error=f"{type(exc).__name__}: {exc}")
            if self._session is not None:
                await self._session.close()

    async def run(self, stop: asyncio.Event) -> None:
        """Evaluate every `evaluation_interval` (read again each time: it may change), and soon
        after a job's state changed, until stopped."""
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            began = loop.time()
            self._prompt.clear()  # a change from now on brings the next evaluation forward
            try:
                if await self._still_leading():
                    await self.tick()
            except LeaseLost as lost:
                log.warning("alerter lease lost; standing by", error=str(lost))
                stop.set()
                return
            if self.handing_over:
                stop.set()
                return
            # Wake for the next evaluation, or sooner when a group's wait or interval ends.
            pause = self.engine.config.settings.evaluation_interval
            due = self.engine.dispatcher.next_due()
            if due is not None:
                pause = max(0.05, min(pause, due - self.clock.now()))
            await _first([stop.wait(), self._prompt.wait()], within=pause)
            if self._prompt.is_set() and not stop.is_set():
                spacing = began + PROMPT_SPACING - loop.time()
                if spacing > 0:
                    await _first([stop.wait()], within=spacing)

    async def _still_leading(self) -> bool:
        """Renew the lease before evaluating: False while the bus cannot say (the evaluation
        waits for the next turn: nothing is stepped, so nothing is skipped); LeaseLost if
        another replica leads."""
        if self.lease is None:
            return True
        try:
            await self.lease.confirm()
        except (NatsError, TimeoutError) as exc:
            log.warning("lease not confirmed; evaluation postponed", error=str(exc) or type(exc).__name__)
            return False
        return True

    # -- inputs ---------------------------------------------------------------------------

    async def on_event(self, event: Event, replayed: bool) -> None:
        """An event from the streams: history at its own time (never later than now), live at now."""
        if isinstance(event, NodeReported):
            self.bus_actions.remember(event)
        now = self.clock.now()
        if replayed:
            self.engine.observe(event, min(event.occurred_at.timestamp(), now), replayed=True)
            self.counts["replayed"] += 1
        else:
            if self.engine.observe(event, now):
                self._prompt.set()
            self.counts["events"] += 1

    async def on_heartbeat(self, msg: Msg) -> None:
        try:
            beat = Heartbeat.model_validate_json(msg.data)
        except ValueError:
            log.warning("unreadable heartbeat ignored", subject=msg.subject)
            return
        now = self.clock.now()
        self.engine.heartbeat(beat.service, now)
        self.counts["heartbeats"] += 1
        if self._services is not None:
            try:
                await self._services.heard(beat.service, now)
            except TRANSIENT_ERRORS as exc:
                log.warning("heartbeat time not stored", service=beat.service, error=str(exc))

    async def on_metrics(self, msg: Msg) -> None:
        try:
            batch = MetricBatch.model_validate_json(msg.data)
        except ValueError:
            log.warning("unreadable metric batch ignored", subject=msg.subject)
            return
        now = self.clock.now()
        for sample in batch.samples:
            self.engine.sample(sample.name, sample.labels | {"node_name": batch.node}, sample.value, now)
        self.counts["samples"] += len(batch.samples)

    async def on_alerts_request(self, msg: Msg) -> None:
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

    async def on_recent_request(self, msg: Msg) -> None:
        """``{"user": name or null, "admin": bool, "since": seconds}`` -> alerts resolved since then."""
        reply: Any
        try:
            request = json.loads(msg.data or b"{}")
            if not isinstance(request, dict):
                raise ValueError("the request must be a JSON object")
            user, admin, since = request.get("user"), request.get("admin", False), request.get("since", 0)
            if (user is not None and not isinstance(user, str)) or not isinstance(admin, bool):
                raise ValueError('send {"user": string or null, "admin": true or false, "since": seconds}')
            if not isinstance(since, int | float) or isinstance(since, bool):
                raise ValueError("since must be a number of seconds since the epoch")
            reply = self.engine.resolved_since(user=user, admin=admin, since=float(since))
        except ValueError as exc:
            reply = {"error": str(exc)}
        await msg.respond(json.dumps(reply).encode())

    async def on_rules_request(self, msg: Msg) -> None:
        await msg.respond(json.dumps(self.engine.rules()).encode())

    def _apply_config(self, config: AlertConfig | None) -> None:
        self.engine.set_config(config or default_config())
        self.engine.stored_config = config is not None
        self.counts["configs"] += 1
        log.info("alerting configuration applied", rules=len(self.engine.config.rules))

    # -- the cycle ------------------------------------------------------------------------

    async def tick(self) -> StepResult:
        """One evaluation at the clock's time: publish transitions, deliver notifications."""
        result = self.engine.step(self.clock.now())
        self.counts["evaluations"] += 1
        for alert in result.fired:
            await self._publish(alert, fired=True)
        for alert in result.resolved:
            await self._publish(alert, fired=False)
        for notification in result.notifications:
            if not await self._time_to_notify():
                # The bus slow or away: what is left is not in the notification log, so the
                # turn ends and the next (this replica again, or the other) rebuilds and sends it.
                log.warning("lease too short to notify; handing over", group=notification.group_key)
                self.handing_over = True
                break
            # Logged first: a successor reads the log when it starts, and must find there
            # everything that was sent (a record that cannot be written is not sent; the turn ends
            # and the rebuild that follows sends it).
            if notification.record is not None and not await self._remember(notification.record):
                self.handing_over = True
                break
            await self._deliver(notification)
        return result

    async def _time_to_notify(self) -> bool:
        """Whether the lease surely lasts through one notification and its record (renewed now
        if not); LeaseLost if another replica holds it."""
        if self.lease is None or self.lease.left() >= NOTIFY_MARGIN:
            return True
        with contextlib.suppress(NatsError, TimeoutError):
            await self.lease.confirm()
        return self.lease.left() >= NOTIFY_MARGIN

    async def _remember(self, record: NotifiedRecord) -> bool:
        """Log what is about to be sent; while the bus does not answer (a NATS server gone, the
        bucket's group electing), again, as long as the lease surely lasts through the sending.
        False: not logged, so not to be sent by a leader (its successor sends it); an alerter
        alone (no lease) sends it anyway, and only its restart would send it again."""
        if self._nflog is None:
            return True
        while True:
            try:
                await self._nflog.put(record)
                return True
            except (NatsError, TimeoutError) as exc:
                if self.lease is not None and self.lease.left() >= NOTIFY_MARGIN:
                    await asyncio.sleep(0.2)  # the bucket's group electing: nothing to await but it
                    continue
                error: Exception = exc
            log.warning(
                "notification not logged", group=record.group_key, error=f"{type(error).__name__}: {error}"
            )
            return self.lease is None

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
            except DELIVERY_ERRORS as exc:
                bound.warning("alert email failed", error=f"{type(exc).__name__}: {exc}")
            except Exception:  # a bug: the next receiver is still served, with the traceback logged
                bound.exception("alert email failed")
        for hook in receiver.webhook_configs:
            try:
                assert self._session is not None, "start() creates the HTTP session"
                await WebhookSender(self._session, external_url=self.external_url).send(hook, notification)
            except DELIVERY_ERRORS as exc:
                bound.warning("alert webhook failed", url=hook.url, error=f"{type(exc).__name__}: {exc}")
            except Exception:
                bound.exception("alert webhook failed", url=hook.url)
        for action in receiver.actions:
            for alert in notification.fresh:  # once per alert: not again at repeats or restarts
                try:
                    await self._act(action.action, action.tag, alert)
                except DELIVERY_ERRORS as exc:
                    bound.warning(
                        "alert action failed", action=action.action, error=f"{type(exc).__name__}: {exc}"
                    )
                except Exception:
                    bound.exception("alert action failed", action=action.action)

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


async def _first(waits: list[Coroutine[Any, Any, Any]], *, within: float | None = None) -> None:
    """Wait until the first of ``waits`` ends (or ``within`` seconds pass); the others are
    cancelled, and one that raised raises here."""
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(w) for w in waits]
        await asyncio.wait(tasks, timeout=within, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()


# Core NATS subjects and the handler of their messages (the streams' events go to `on_event`).
SUBJECTS: Mapping[str, Callable[[Alerter, Msg], Awaitable[None]]] = {
    HEALTH_SUBJECTS: Alerter.on_heartbeat,
    METRICS_SUBJECTS: Alerter.on_metrics,
    ALERTS_RPC: Alerter.on_alerts_request,
    RECENT_ALERTS_RPC: Alerter.on_recent_request,
    ALERT_RULES_RPC: Alerter.on_rules_request,
}
