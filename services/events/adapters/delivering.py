"""Webhook delivery: subscriptions in KV, a durable consumer per stream, signed POSTs with retries.

The gateway owns two buckets: ``PAI_WEBHOOKS`` (subscriptions, watched so every replica knows
them) and ``PAI_WEBHOOK_DELIVERIES`` (the recent attempts per subscription). Delivery progress
is the durable consumers' (``events-webhooks-<stream>``): a message is acknowledged once every
matching subscription took it or gave up, so a gateway killed mid-delivery delivers again
(at least once; receivers deduplicate by ``X-PAI-Delivery``). Messages are handled in order per
job (``consume(key=by_job_id)``), so a subscription receives one job's events in order; while
a receiver fails, its job's later events wait behind the retries (exponential backoff) until
the retry window ends; then the subscription is marked failing, an ``alert.fired`` says so,
and it receives nothing more until a redelivery succeeds.
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
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from libs.backbone.consuming import by_job_id, consume
from libs.backbone.errors import KVConflictError, TemporaryError
from libs.backbone.kv import ModelStore
from libs.backbone.provisioning import ConsumerSpec, KVSpec, ensure_consumer, ensure_kv
from libs.backbone.topology import publish_event
from libs.protocol.events import AlertFired, AlertResolved
from services.events.adapters.following import STREAM_NAMES, Hub
from services.events.core.directory import locate
from services.events.core.filters import wanted
from services.events.core.webhooks import (
    Attempt,
    Attempts,
    IPNetwork,
    Webhook,
    backoff,
    forbidden_address,
    retryable,
    signature,
)
from services.events.settings import EventsSettings

log = structlog.get_logger(__name__)

WEBHOOKS = KVSpec("PAI_WEBHOOKS", description="the events gateway's webhook subscriptions by id")
DELIVERIES = KVSpec(
    "PAI_WEBHOOK_DELIVERIES", description="the events gateway's recent delivery attempts per webhook"
)


# Seconds new attempts wait to share one KV write; messages fetched at once per stream.
FLUSH_EVERY = 0.2
BATCH = 64


def durable(stream: str) -> str:
    return f"events-webhooks-{stream}"


class AddressRefused(Exception):
    """A receiver's host resolves into a range the admin forbade."""


async def resolve(host: str) -> list[str]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


async def check_reachable(url: str, networks: tuple[IPNetwork, ...]) -> None:
    """Refuse a URL whose host is (or resolves) inside a forbidden range."""
    if not networks:
        return
    host = urlsplit(url).hostname or ""
    try:
        addresses = await resolve(host)
    except OSError:
        return  # unknown now; checked again at every delivery
    refused = forbidden_address(addresses, networks)
    if refused is not None:
        raise AddressRefused(f"url's host {host} is {refused}, in an address range webhooks may not reach.")


class Deliveries:
    def __init__(
        self,
        js: JetStreamContext,
        hub: Hub,
        session: aiohttp.ClientSession,
        settings: EventsSettings,
        networks: tuple[IPNetwork, ...],
    ) -> None:
        self.js = js
        self.hub = hub
        self.session = session
        self.settings = settings
        self.networks = networks
        self.webhooks: dict[str, Webhook] = {}
        self.store: ModelStore[Webhook] | None = None
        self.attempts: ModelStore[Attempts] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()
        self._unwritten: dict[str, list[Attempt]] = {}
        self._dirty = asyncio.Event()
        self.clock: Callable[[], datetime] = lambda: datetime.now(UTC)

    async def start(self) -> None:
        await ensure_kv(self.js, WEBHOOKS)
        await ensure_kv(self.js, DELIVERIES)
        self.store = await ModelStore.open(self.js, WEBHOOKS.bucket, Webhook)
        self.attempts = await ModelStore.open(self.js, DELIVERIES.bucket, Attempts)
        for key in await self.store.keys():
            found = await self.store.get(key)
            if found is not None:
                self.webhooks[key] = found.value
        self._tasks.append(asyncio.create_task(self._watch()))
        self._flusher = asyncio.create_task(self._flush_forever())
        for stream, name in STREAM_NAMES.items():
            await ensure_consumer(
                self.js,
                ConsumerSpec(
                    name,
                    durable(stream),
                    deliver_policy=DeliverPolicy.NEW,
                    description="webhook deliveries of the events gateway",
                ),
            )
            self._tasks.append(
                asyncio.create_task(
                    consume(
                        self.js, name, durable(stream), self._handler(stream), stop=self._stop, key=by_job_id
                    )
                )
            )

    async def stop(self) -> None:
        self._stop.set()
        watch = self._tasks[0] if self._tasks else None
        if watch is not None:
            watch.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*self._tasks, return_exceptions=True), 10.0)
        for task in self._tasks:
            task.cancel()
        self._flusher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._flusher
        await self.flush()

    async def _watch(self) -> None:
        assert self.store is not None
        async for change in self.store.watch():
            if change.value is None:
                self.webhooks.pop(change.key, None)
            else:
                self.webhooks[change.key] = change.value

    # Subscriptions ------------------------------------------------------------------------

    async def create(self, hook: Webhook) -> Webhook:
        assert self.store is not None
        hook = hook.model_copy(update={"id": uuid.uuid4().hex, "start": dict(self.hub.last)})
        await self.store.create(hook.id, hook)
        self.webhooks[hook.id] = hook
        return hook

    async def delete(self, hook_id: str) -> None:
        assert self.store is not None
        assert self.attempts is not None
        await self.store.delete(hook_id)
        with contextlib.suppress(nats.errors.Error):
            await self.attempts.delete(hook_id)
        self.webhooks.pop(hook_id, None)

    async def recent(self, hook_id: str) -> list[Attempt]:
        assert self.attempts is not None
        found = await self.attempts.get(hook_id)
        stored = list(found.value.items) if found else []
        kept = self.settings.webhook_deliveries_kept
        return (stored + self._unwritten.get(hook_id, []))[-kept:]

    async def _record(self, hook_id: str, attempt: Attempt) -> None:
        """Keep an attempt; the flusher writes each webhook's new attempts to KV together."""
        self._unwritten.setdefault(hook_id, []).append(attempt)
        self._dirty.set()

    async def _flush_forever(self) -> None:
        while not self._stop.is_set():
            await self._dirty.wait()
            await asyncio.sleep(FLUSH_EVERY)  # a timer: attempts of the next moments share the write
            await self.flush()

    async def flush(self) -> None:
        assert self.attempts is not None
        self._dirty.clear()
        pending, self._unwritten = self._unwritten, {}
        keep = self.settings.webhook_deliveries_kept
        for hook_id, attempts in pending.items():
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
                    break
                except KVConflictError:
                    continue  # another replica wrote first: read and add again

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
            summary = f"webhook {hook.id} to {hook.url} failed for the whole retry window: {error}"
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

    def _handler(self, stream: str):  # type: ignore[no-untyped-def]
        async def handle(msg: Msg) -> None:
            sequence = msg.metadata.sequence.stream
            data = orjson.loads(msg.data)
            located = locate(data, self.hub.directory)
            job = self.hub.directory.job(located.job_id)
            targets = [
                hook
                for hook in list(self.webhooks.values())
                if not hook.failing
                and sequence > hook.start.get(stream, 0)
                and wanted(hook.caller, hook.filter, located.type, job)
            ]
            if not targets:
                return
            event_id = str(data.get("event_id", ""))
            await asyncio.gather(
                *(self.deliver(hook, stream, sequence, located.type, event_id, msg.data) for hook in targets)
            )

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
        try:
            await check_reachable(hook.url, self.networks)
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
            error = str(exc)
        except TimeoutError:
            error = f"no answer within {self.settings.webhook_timeout_seconds:g}s"
        except aiohttp.ClientError as exc:
            error = f"{type(exc).__name__}: {exc}"
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
            at=self.clock(),
        )
        await self._record(hook.id, record)
        return record

    async def deliver(
        self, hook: Webhook, stream: str, sequence: int, kind: str, event_id: str, body: bytes
    ) -> None:
        """Deliver until the receiver takes it, refuses it for good, or the retry window ends."""
        first_try = time.monotonic()
        number = 1
        while True:
            record = await self.attempt(hook, stream, sequence, kind, event_id, body, number)
            refused = record.status is None and record.error.startswith("url's host")
            if record.ok or refused or not retryable(record.status):
                return  # taken, or refused for good (a 4xx, a forbidden address): not retried
            if time.monotonic() - first_try >= self.settings.webhook_retry_window_seconds:
                log.warning("webhook failing; deliveries stop", webhook=hook.id, error=record.error)
                await self._mark(hook, failing=True, error=record.error)
                return
            current = self.webhooks.get(hook.id)
            if current is None:
                return  # deleted meanwhile
            delay = backoff(
                number, self.settings.webhook_backoff_first_seconds, self.settings.webhook_backoff_max_seconds
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
