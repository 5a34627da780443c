"""Webhook delivery: subscriptions in KV, a durable consumer per subscription, signed POSTs with retries.

The gateway owns two buckets: ``PAI_WEBHOOKS`` (subscriptions, watched so every replica knows
them) and ``PAI_WEBHOOK_DELIVERIES`` (the recent attempts per subscription). Each subscription
is its own delivery queue: a durable consumer per stream it follows
(``events-webhook-<id>-<stream>``, starting after what the stream held at its creation), read
by a loop of its own with its own concurrency budget (``webhook_concurrency`` deliveries at
once). A receiver that refuses connections, answers 5xx or never answers holds only its own
subscription's queue; no other subscription waits for it, and the HTTP client has no shared
connection limit to exhaust. A message is acknowledged once its subscription took it or gave up,
so a gateway killed mid-delivery delivers again (at least once; receivers deduplicate by
``X-PAI-Delivery``). Messages are handled in order per job (``consume(key=by_job_id)``), so a
subscription receives one job's events in order; while its receiver fails, that job's later
events wait behind the retries (exponential backoff) until the retry window ends; a 4xx answer
is retried ``webhook_client_error_attempts`` times by default (``webhook_client_errors``:
``retry``, ``fail`` or ``drop``). A subscription that gives up is marked failing, an
``alert.fired`` says so, and it receives nothing more until a redelivery succeeds.

Receivers are checked where they are connected to: the HTTP client's resolver resolves each
host once and refuses every address the ``TargetPolicy`` forbids, so the address checked is the
address connected to (a name cannot resolve elsewhere between the check and the connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from urllib.parse import urlsplit

import aiohttp
import nats.errors
import orjson
import structlog
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from libs.backbone.consuming import by_job_id, consume
from libs.backbone.errors import KVConflictError, TemporaryError
from libs.backbone.kv import ModelStore
from libs.backbone.provisioning import KVSpec, ensure_kv
from libs.backbone.topology import publish_event
from libs.protocol.events import AlertFired, AlertResolved
from services.events.adapters.following import STREAM_NAMES, STREAM_SUBJECTS, Hub
from services.events.core.directory import locate
from services.events.core.filters import wanted
from services.events.core.webhooks import (
    LOOPBACK_ADDRESSES,
    Attempt,
    Attempts,
    IPAddress,
    TargetPolicy,
    Webhook,
    backoff,
    client_error_verdict,
    literal_address,
    loopback_name,
    refused_address,
    retryable,
    signature,
    url_port,
)
from services.events.settings import EventsSettings

log = structlog.get_logger(__name__)

WEBHOOKS = KVSpec("PAI_WEBHOOKS", description="the events gateway's webhook subscriptions by id")
DELIVERIES = KVSpec(
    "PAI_WEBHOOK_DELIVERIES", description="the events gateway's recent delivery attempts per webhook"
)

# Seconds new attempts wait to share one KV write.
FLUSH_EVERY = 0.2
# The shared consumers of earlier versions (one per stream for every subscription), removed at start.
OLD_DURABLES = tuple(f"events-webhooks-{stream}" for stream in STREAM_NAMES)


def durable(hook_id: str, stream: str) -> str:
    return f"events-webhook-{hook_id}-{stream}"


class AddressRefused(Exception):
    """A receiver's host is (or resolves to) an address the target policy forbids."""


class CheckingResolver(AbstractResolver):
    """Resolves a receiver's host once and refuses it when any address is forbidden.

    aiohttp connects to what this returns, so no second lookup can answer differently (DNS
    rebinding); literal addresses never reach a resolver and are checked by ``check_target``.
    """

    def __init__(self, policy: TargetPolicy) -> None:
        self.policy = policy
        self._inner = ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        literal = literal_address(host)
        if literal is not None:
            infos = [_numeric(host, literal, port)]
        elif loopback_name(host):
            # localhost names are this machine's, whatever the resolver would say of them.
            version = {socket.AF_INET: 4, socket.AF_INET6: 6}.get(family)
            infos = [
                _numeric(host, address, port)
                for address in LOOPBACK_ADDRESSES
                if version is None or address.version == version
            ]
        else:
            infos = await self._inner.resolve(host, port, family)
        reason = refused_address([info["host"] for info in infos], port, self.policy)
        if reason is not None:
            raise AddressRefused(f"url's host {host} is refused: {reason}.")
        return infos

    async def close(self) -> None:
        await self._inner.close()


def _numeric(host: str, address: IPAddress, port: int) -> ResolveResult:
    return ResolveResult(
        hostname=host,
        host=str(address),
        port=port,
        family=socket.AF_INET6 if address.version == 6 else socket.AF_INET,
        proto=0,
        flags=socket.AI_NUMERICHOST,
    )


async def check_target(url: str, resolver: CheckingResolver) -> None:
    """Refuse a URL whose host is, or resolves to, a forbidden address (``AddressRefused``);
    a name that does not resolve now is let through (checked again at every delivery)."""
    host = urlsplit(url).hostname or ""
    with contextlib.suppress(OSError):
        await resolver.resolve(host, url_port(url), socket.AF_UNSPEC)


def receivers_session(resolver: CheckingResolver) -> aiohttp.ClientSession:
    """The client every delivery uses: the checking resolver and no shared connection limit
    (each subscription's concurrency budget bounds its own connections)."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, resolver=resolver))


class Lane:
    """One subscription's delivery queue: a consuming loop per followed stream."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    async def close(self, patience: float = 10.0) -> None:
        self.stop.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*self.tasks, return_exceptions=True), patience)
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


class Deliveries:
    def __init__(
        self,
        js: JetStreamContext,
        hub: Hub,
        session: aiohttp.ClientSession,
        settings: EventsSettings,
        resolver: CheckingResolver,
    ) -> None:
        self.js = js
        self.hub = hub
        self.session = session
        self.settings = settings
        self.resolver = resolver
        self.webhooks: dict[str, Webhook] = {}
        self.store: ModelStore[Webhook] | None = None
        self.attempts: ModelStore[Attempts] | None = None
        self._lanes: dict[str, Lane] = {}
        self._watching: asyncio.Task[None] | None = None
        self._tasks: asyncio.TaskGroup | None = None
        self._stop = asyncio.Event()
        self._unwritten: dict[str, list[Attempt]] = {}
        self._writing: dict[str, list[Attempt]] = {}
        self._dirty = asyncio.Event()
        self.clock: Callable[[], datetime] = lambda: datetime.now(UTC)

    async def start(self, tasks: asyncio.TaskGroup) -> None:
        """Open every subscription's lane and watch for new ones; the consuming loops, the watch
        and the attempts' writer run in ``tasks``, so one that raises stops the gateway."""
        self._tasks = tasks
        await ensure_kv(self.js, WEBHOOKS)
        await ensure_kv(self.js, DELIVERIES)
        self.store = await ModelStore.open(self.js, WEBHOOKS.bucket, Webhook)
        self.attempts = await ModelStore.open(self.js, DELIVERIES.bucket, Attempts)
        for stream, name in STREAM_NAMES.items():
            with contextlib.suppress(NotFoundError):
                await self.js.delete_consumer(name, f"events-webhooks-{stream}")
        for key, found in (await self.store.current()).items():
            self.webhooks[key] = found.value
            await self._open_lane(found.value)
        self._watching = tasks.create_task(self._watch(), name="webhooks-watch")
        self._flusher = tasks.create_task(self._flush_forever(), name="webhooks-attempts")

    async def stop(self) -> None:
        self._stop.set()
        if self._watching is not None:
            self._watching.cancel()
            await asyncio.gather(self._watching, return_exceptions=True)
        await asyncio.gather(*(lane.close() for lane in self._lanes.values()))
        self._lanes.clear()
        self._flusher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._flusher
        await self.flush()

    async def _watch(self) -> None:
        assert self.store is not None
        async for change in self.store.watch():
            if change.value is None:
                self.webhooks.pop(change.key, None)
                lane = self._lanes.pop(change.key, None)
                if lane is not None:
                    await lane.close()
            else:
                self.webhooks[change.key] = change.value
                if change.key not in self._lanes:
                    await self._open_lane(change.value)

    async def _open_lane(self, hook: Webhook) -> None:
        """Start delivering ``hook``'s events: its consumers (created once, kept across restarts)."""
        if hook.id in self._lanes or self._stop.is_set():
            return
        lane = self._lanes[hook.id] = Lane()
        budget = self.settings.webhook_concurrency
        for stream in hook.filter.streams():
            name = STREAM_NAMES[stream]
            config = ConsumerConfig(
                name=durable(hook.id, stream),
                durable_name=durable(hook.id, stream),
                description=f"webhook {hook.id} of {hook.owner}",
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=hook.start.get(stream, 0) + 1,
                filter_subject=STREAM_SUBJECTS[stream],
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=30.0,
                max_ack_pending=max(budget, 64),
            )
            try:
                await self.js.add_consumer(name, config)
            except nats.errors.Error as exc:
                log.warning("webhook consumer not created", webhook=hook.id, stream=stream, error=str(exc))
                continue
            assert self._tasks is not None, "start() opens lanes in its task group"
            lane.tasks.append(
                self._tasks.create_task(
                    consume(
                        self.js,
                        name,
                        durable(hook.id, stream),
                        self._handler(hook.id, stream),
                        stop=lane.stop,
                        key=by_job_id,
                        batch=budget,
                        max_in_flight=budget,
                    )
                )
            )

    async def _close_lane(self, hook: Webhook) -> None:
        lane = self._lanes.pop(hook.id, None)
        if lane is not None:
            await lane.close(patience=1.0)
        for stream in hook.filter.streams():
            with contextlib.suppress(NotFoundError, nats.errors.Error):
                await self.js.delete_consumer(STREAM_NAMES[stream], durable(hook.id, stream))

    # Subscriptions ------------------------------------------------------------------------

    async def create(self, hook: Webhook) -> Webhook:
        assert self.store is not None
        hook = hook.model_copy(update={"id": uuid.uuid4().hex, "start": dict(self.hub.last)})
        await self.store.create(hook.id, hook)
        self.webhooks[hook.id] = hook
        await self._open_lane(hook)
        return hook

    async def delete(self, hook_id: str) -> None:
        assert self.store is not None
        assert self.attempts is not None
        await self.store.delete(hook_id)
        with contextlib.suppress(nats.errors.Error):
            await self.attempts.delete(hook_id)
        hook = self.webhooks.pop(hook_id, None)
        if hook is not None:
            await self._close_lane(hook)

    async def recent(self, hook_id: str) -> list[Attempt]:
        """What KV holds, then what is being written and what is not written yet.

        The attempts in memory are taken before KV is read: a write that ends meanwhile shows
        them in both, once (never in neither)."""
        assert self.attempts is not None
        in_memory = [*self._writing.get(hook_id, []), *self._unwritten.get(hook_id, [])]
        found = await self.attempts.get(hook_id)
        stored = list(found.value.items) if found else []
        kept = self.settings.webhook_deliveries_kept
        return (stored + [a for a in in_memory if a not in stored])[-kept:]

    async def _record(self, hook_id: str, attempt: Attempt) -> None:
        """Keep an attempt; the flusher writes each webhook's new attempts to KV together."""
        self._unwritten.setdefault(hook_id, []).append(attempt)
        self._dirty.set()

    async def _flush_forever(self) -> None:
        while not self._stop.is_set():
            await self._dirty.wait()
            await asyncio.sleep(FLUSH_EVERY)  # a timer: attempts of the next moments share the write
            try:
                await self.flush()
            except (nats.errors.Error, TimeoutError, OSError) as exc:
                # The bus is away: the attempts are kept in memory and written once it is back.
                log.warning("delivery attempts not recorded yet; the bus failed", error=repr(exc))

    async def flush(self) -> None:
        assert self.attempts is not None
        self._dirty.clear()
        # Taken out of the unwritten ones but still shown by recent() until KV holds them.
        pending, self._unwritten = self._unwritten, {}
        self._writing = pending
        try:
            await self._write(pending)
        finally:
            # What was not written (contended, or the bus failed) goes first in the next write.
            for hook_id, attempts in pending.items():
                self._unwritten[hook_id] = [*attempts, *self._unwritten.get(hook_id, [])]
                self._dirty.set()
            self._writing = {}

    async def _write(self, pending: dict[str, list[Attempt]]) -> None:
        assert self.attempts is not None
        keep = self.settings.webhook_deliveries_kept
        for hook_id, attempts in list(pending.items()):
            for _ in range(20):
                found = await self.attempts.get(hook_id)
                merged = Attempts(
                    items=((*found.value.items, *attempts) if found else tuple(attempts))[-keep:]
                )
                try:
                    if found is None:
                        await self.attempts.create(hook_id, merged)
                    else:
                        await self.attempts.update(hook_id, merged, found.revision)
                    del pending[hook_id]  # in KV now: recent() reads them there
                    break
                except KVConflictError:
                    continue  # another replica wrote first: read and add again
            else:
                # Still contended after 20 reads: kept (ahead of what came since) for the next
                # write, and said, rather than lost without a word.
                log.warning(
                    "delivery attempts not recorded yet; kept for the next write",
                    webhook=hook_id,
                    attempts=len(attempts),
                )

    async def _mark(self, hook: Webhook, *, failing: bool, error: str = "") -> None:
        assert self.store is not None
        found = await self.store.get(hook.id)
        if found is None:
            return
        changes = {
            "failing": failing,
            "failing_since": self.clock() if failing else None,
            "last_error": error,
        }
        updated = found.value.model_copy(update=changes)
        with contextlib.suppress(KVConflictError):
            await self.store.update(hook.id, updated, found.revision)
            self.webhooks[hook.id] = updated
        labels = {"webhook": hook.id, "username": hook.owner}
        alert_id = f"webhook-{hook.id}"
        if failing:
            summary = f"webhook {hook.id} to {hook.url} is failing, its deliveries stopped: {error}"
            await publish_event(
                self.js,
                AlertFired(
                    alert_id=alert_id,
                    name="WebhookFailing",
                    severity="warning",
                    labels=labels,
                    summary=summary,
                ),
            )
        else:
            await publish_event(
                self.js, AlertResolved(alert_id=alert_id, name="WebhookFailing", labels=labels)
            )

    # Delivery -----------------------------------------------------------------------------

    def _handler(self, hook_id: str, stream: str):  # type: ignore[no-untyped-def]
        async def handle(msg: Msg) -> None:
            hook = self.webhooks.get(hook_id)
            if hook is None or hook.failing:
                return  # deleted, or failing: nothing is delivered until a redelivery succeeds
            data = orjson.loads(msg.data)
            located = locate(data, self.hub.directory, msg.metadata.sequence.stream)
            job = self.hub.directory.job(located.job_id)
            item = self.hub.directory.item(located.item_id)
            if not wanted(hook.caller, hook.filter, located.type, job, item):
                return
            event_id = str(data.get("event_id", ""))
            await self.deliver(hook, stream, msg.metadata.sequence.stream, located.type, event_id, msg.data)

        return handle

    async def attempt(
        self, hook: Webhook, stream: str, sequence: int, kind: str, event_id: str, body: bytes, number: int
    ) -> Attempt:
        """One POST to the receiver, recorded."""
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "pai-webhooks",
            "X-PAI-Event": kind,
            "X-PAI-Delivery": event_id,
            "X-PAI-Signature-256": signature(hook.secret, body),
        }
        started = time.monotonic()
        status: int | None = None
        error = ""
        refused = False
        try:
            # A literal address is connected to as it is, without the resolver: checked here.
            literal = literal_address(urlsplit(hook.url).hostname or "")
            if literal is not None:
                await check_target(hook.url, self.resolver)
            async with self.session.post(
                hook.url,
                data=body,
                headers=headers,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=self.settings.webhook_timeout_seconds),
            ) as response:
                status = response.status
                if status >= 300:
                    error = f"HTTP {status}"
        except AddressRefused as exc:
            error, refused = str(exc), True
        except TimeoutError:
            error = f"no answer within {self.settings.webhook_timeout_seconds:g}s"
        except aiohttp.ClientError as exc:
            cause = getattr(exc, "os_error", None)
            refused = isinstance(cause, AddressRefused)
            error = str(cause) if refused else f"{type(exc).__name__}: {exc}"
        record = Attempt(
            delivery=event_id,
            type=kind,
            stream=stream,
            sequence=sequence,
            attempt=number,
            status=status,
            latency_ms=(time.monotonic() - started) * 1000,
            error=error,
            ok=status is not None and 200 <= status < 300,
            refused=refused,
            at=self.clock(),
        )
        await self._record(hook.id, record)
        return record

    async def deliver(
        self, hook: Webhook, stream: str, sequence: int, kind: str, event_id: str, body: bytes
    ) -> None:
        """Deliver until the receiver takes it, or the subscription gives up and is marked failing.

        Retried: no answer, 5xx, 408, 429 (for the retry window), a forbidden address (the
        admin may allow it meanwhile), other 4xx as ``webhook_client_errors`` says.
        """
        first_try = time.monotonic()
        number = 1
        settings = self.settings
        while True:
            record = await self.attempt(hook, stream, sequence, kind, event_id, body, number)
            if record.ok:
                return
            give_up = time.monotonic() - first_try >= settings.webhook_retry_window_seconds
            error = record.error
            if record.refused:
                give_up = True  # the address is forbidden: the owner must change it (or an admin allow it)
            elif not retryable(record.status):
                verdict = client_error_verdict(
                    settings.webhook_client_errors, number, settings.webhook_client_error_attempts
                )
                if verdict == "drop":
                    return  # the admin chose so: recorded in the deliveries, then the next event
                if verdict == "fail":
                    give_up = True
                    error = f"HTTP {record.status}: the receiver refused the delivery {number} times"
            if give_up:
                log.warning("webhook failing; deliveries stop", webhook=hook.id, error=error)
                await self._mark(hook, failing=True, error=error)
                return
            current = self.webhooks.get(hook.id)
            if current is None or current.failing:
                return  # deleted, or marked failing by another delivery meanwhile
            delay = backoff(
                number, settings.webhook_backoff_first_seconds, settings.webhook_backoff_max_seconds
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
            if self._stop.is_set():
                # Not acknowledged: delivered again after the restart.
                raise TemporaryError("the gateway stops", delay=1.0)
            number += 1

    async def redeliver(self, hook: Webhook, delivery: str) -> Attempt | None:
        """Send a recorded delivery once more; a success takes a failing subscription back."""
        previous = next((a for a in reversed(await self.recent(hook.id)) if a.delivery == delivery), None)
        if previous is None:
            return None
        stored = await self.js.get_msg(STREAM_NAMES[previous.stream], previous.sequence)
        body = stored.data or b""
        record = await self.attempt(
            hook, previous.stream, previous.sequence, previous.type, delivery, body, previous.attempt + 1
        )
        if record.ok and hook.failing:
            await self._mark(hook, failing=False)
        return record
