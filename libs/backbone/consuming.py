"""The durable pull-consumer loop every service runs, and how handler outcomes become acks.

A handler is ``async def handler(msg) -> None``. What it raises decides the message's fate:
nothing -> ack; ``TemporaryError`` -> nak with its delay; ``PermanentError`` or undecodable
content -> term (logged with the reason); anything else -> logged and nak'ed with a growing
delay, so one poisoned message never stops the loop. While a handler runs longer than
``in_progress_every`` the loop tells JetStream it is still working (+WPI) so a long task is
not redelivered to another replica. When ``stop`` is set the loop stops fetching, lets
in-flight handlers finish and returns, which is the graceful SIGTERM path.

With ``key`` (a function of the message, e.g. the job id) messages of one key are handled in
order and different keys concurrently (``KeyedWorkQueue``); without it, one at a time.

``subscribe_ordered`` is the other way a service follows a stream: a push consumer in order from
a sequence, without acks, for state rebuilt from the whole stream (the scheduler, the monitor).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any

import nats.errors
import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerInfo
from nats.js.errors import NotFoundError
from opentelemetry.trace import SpanKind, Status, StatusCode
from pydantic import ValidationError

from libs.backbone.errors import TRANSIENT_ERRORS, PermanentError, TemporaryError
from libs.backbone.publishing import MSG_ID_HEADER, messaging_attributes, subject_template
from libs.backbone.queueing import KeyedWorkQueue
from libs.backbone.tracing import extract_context, message_span

log = structlog.get_logger(__name__)

Handler = Callable[[Msg], Awaitable[None]]
KeyFunction = Callable[[Msg], str | None]

# Errors that mean the content can never be decoded: retrying cannot help.
DECODE_ERRORS = (ValidationError, json.JSONDecodeError, UnicodeDecodeError)
SLOW_HANDLING_SECONDS = 1.0
"""A message acked after at least this long is logged at info, as one not acked is."""
# How long a consumer may be missing on start before that is taken for the caller's bug.
MISSING_FOR = 5.0

# Redelivery delays for unexpected exceptions: 0.5 s doubling up to 60 s.
_BACKOFF_FIRST = 0.5
_BACKOFF_MAX = 60.0
# Idle heartbeat of a long-lived ordered consumer: one lost with a restarted server (ordered
# consumers live in its memory) is missed after two silent beats and recreated from the last
# sequence, so a second keeps the gap after a bus restart at 2-4 s (nats-py's default, 5 s,
# made it 10-20 s: jobs waited that long to be scheduled).
ORDERED_HEARTBEAT = 1.0


class Outcome(StrEnum):
    """How a handled message was settled: its value is what logs and spans say (``pai.outcome``)."""

    ACKED = "acked"  # handled
    RETRY = "retry"  # nak'ed with the TemporaryError's delay
    TERMINATED = "terminated"  # term: a PermanentError, or content that never decodes
    FAILED = "failed"  # an unexpected error: nak'ed with a growing delay


async def subscribe_ordered(
    js: JetStreamContext, subject: str, **options: Any
) -> JetStreamContext.PushSubscription:
    """A long-lived ordered consumer of ``subject`` (``options`` as nats-py's ``subscribe`` takes
    them), beating every ``ORDERED_HEARTBEAT`` so that one lost with a restarted server is
    recreated within seconds."""
    return await js.subscribe(subject, ordered_consumer=True, idle_heartbeat=ORDERED_HEARTBEAT, **options)


def job_id_of(subject: str) -> str | None:
    """The job id in ``pai.job.<id>.<event>`` subjects, else None."""
    tokens = subject.split(".")
    if len(tokens) >= 4 and tokens[0] == "pai" and tokens[1] == "job":
        return tokens[2]
    return None


def by_job_id(msg: Msg) -> str | None:
    """A ``key`` function for :func:`consume` that orders messages per job."""
    return job_id_of(msg.subject)


def failure_backoff(num_delivered: int) -> float:
    """Delay before redelivering a message whose handler failed unexpectedly."""
    return min(_BACKOFF_MAX, _BACKOFF_FIRST * float(2 ** min(16, max(0, num_delivered - 1))))


def _num_delivered(msg: Msg) -> int:
    try:
        return int(msg.metadata.num_delivered)
    except nats.errors.Error:
        return 1


class KeepAlive:
    """Sends +WPI for a message every ``every`` seconds until stopped.

    A timer of the event loop, not a task: a message handled well within its ack wait (nearly
    all of them) costs a timer set and cancelled, where a task per message cost about 20 us of
    CPU to create, cancel and reap (30,000 of them for a 10,000-task job's events).
    """

    def __init__(self, msg: Msg, every: float) -> None:
        self._msg = msg
        self._every = every
        self._loop = asyncio.get_running_loop()
        self._timer = self._loop.call_later(every, self._tick)
        self._sending: asyncio.Task[None] | None = None
        self._stopped = False

    def _tick(self) -> None:
        if self._stopped:
            return
        if self._sending is None or self._sending.done():
            self._sending = self._loop.create_task(self._send())
        self._timer = self._loop.call_later(self._every, self._tick)

    async def _send(self) -> None:
        try:
            await self._msg.in_progress()
        except nats.errors.Error as exc:
            log.warning("in-progress ack failed", error=str(exc))

    def cancel(self) -> None:
        """No more +WPI from now on (one being sent may still finish: `stop` waits for it)."""
        self._stopped = True
        self._timer.cancel()

    async def stop(self) -> None:
        self.cancel()
        if self._sending is not None:
            self._sending.cancel()
            await asyncio.gather(self._sending, return_exceptions=True)


async def handle_message(
    msg: Msg,
    handler: Handler,
    *,
    in_progress_every: float | None = None,
    keep_alive: KeepAlive | None = None,
) -> Outcome:
    """Run ``handler`` on one message and settle it; returns the outcome for logs and tests.

    ``keep_alive`` is a +WPI ticker started earlier (when the message was queued); otherwise one
    is started here when ``in_progress_every`` is given. Either stops before the message is settled.
    """
    headers = msg.headers or {}
    msg_id = headers.get(MSG_ID_HEADER)
    job_id = job_id_of(msg.subject)
    context_vars: dict[str, str] = {"subject": msg.subject}
    if msg_id:
        context_vars["msg_id"] = msg_id
    if job_id:
        context_vars["job_id"] = job_id
    attributes = messaging_attributes(msg.subject, msg_id, len(msg.data))
    attributes["messaging.operation.type"] = "process"
    delivered = _num_delivered(msg)
    attributes["messaging.nats.delivered"] = delivered
    started = time.monotonic()
    with (
        structlog.contextvars.bound_contextvars(**context_vars),
        message_span(
            f"process {subject_template(msg.subject)}",
            context=extract_context(headers),
            kind=SpanKind.CONSUMER,
            attributes=attributes,
        ) as span,
    ):
        ticker = keep_alive
        if ticker is None and in_progress_every:
            ticker = KeepAlive(msg, in_progress_every)
        outcome = Outcome.ACKED
        delay: float | None = None
        reason: str | None = None
        try:
            await handler(msg)
        except TemporaryError as exc:
            outcome, delay, reason = Outcome.RETRY, exc.delay, str(exc)
        except PermanentError as exc:
            outcome, reason = Outcome.TERMINATED, exc.reason
        except DECODE_ERRORS as exc:
            outcome, reason = Outcome.TERMINATED, f"undecodable message: {exc}"
        except Exception as exc:
            outcome, delay = Outcome.FAILED, failure_backoff(delivered)
            reason = f"{type(exc).__name__}: {exc}"
            span.record_exception(exc)
            log.exception("handler failed unexpectedly; will retry", delivered=delivered, delay=delay)
        finally:
            if ticker is not None:
                await ticker.stop()
        try:
            if outcome is Outcome.ACKED:
                await msg.ack()
            elif outcome is Outcome.TERMINATED:
                await msg.term()
            else:
                await msg.nak(delay=delay)
        except nats.errors.Error as exc:
            # The connection is gone; JetStream redelivers after ack_wait, handlers are idempotent.
            log.warning("could not settle message", outcome=outcome.value, error=str(exc))
        if outcome is not Outcome.ACKED:
            span.set_status(Status(StatusCode.ERROR, reason))
        span.set_attribute("pai.outcome", outcome.value)
        # The canonical line per handled message: at debug for a message acked in good time (at
        # thousands a second, a line each would cost each consumer a tenth of its CPU and fill
        # the disk), at info for anything else.
        duration = time.monotonic() - started
        routine = outcome is Outcome.ACKED and duration < SLOW_HANDLING_SECONDS
        (log.debug if routine else log.info)(
            "message handled",
            outcome=outcome.value,
            delivered=delivered,
            duration_ms=round(duration * 1000, 1),
            **({"reason": reason} if reason else {}),
            **({"delay": delay} if delay else {}),
        )
    return outcome


async def consume(
    js: JetStreamContext,
    stream: str,
    durable: str,
    handler: Handler,
    *,
    stop: asyncio.Event,
    batch: int = 10,
    fetch_timeout: float = 1.0,
    in_progress_every: float | None = None,
    key: KeyFunction | None = None,
    max_in_flight: int = 256,
    pipeline: int = 1,
) -> None:
    """Consume the durable pull consumer ``durable`` on ``stream`` until ``stop`` is set.

    The consumer must exist (see ``ensure_consumer``). ``in_progress_every`` defaults to a third
    of the consumer's ack_wait. ``fetch_timeout`` bounds how long a stop request waits for an
    idle fetch. With ``key``, ``pipeline`` lets that many messages of one key be handled at once,
    started in order (``KeyedWorkQueue``): only for a handler that takes its place in order before
    it first waits. Returns after every fetched message was settled.
    """
    bound = log.bind(stream=stream, consumer=durable)
    info = await _consumer_info(js, stream, durable, stop, bound)
    if info is None:
        return
    if in_progress_every is None:
        ack_wait = info.config.ack_wait or 30.0
        in_progress_every = max(0.05, ack_wait / 3)
    sub = await js.pull_subscribe_bind(durable=durable, stream=stream)
    queue = KeyedWorkQueue(limit=max(max_in_flight, batch) if key else batch, pipeline=pipeline if key else 1)
    bound.info("consuming")
    failures = 0
    tickers: set[KeepAlive] = set()
    try:
        while not stop.is_set():
            await queue.wait_for_room(1)
            try:
                msgs = await sub.fetch(min(batch, queue.room), timeout=fetch_timeout)
            except nats.errors.TimeoutError:
                failures = 0
                continue
            except nats.errors.ConnectionClosedError:
                bound.warning("bus closed; consumer stops")
                break
            except TRANSIENT_ERRORS as exc:
                # Reconnects, leader changes, a consumer being recreated: wait a little, retry.
                failures += 1
                pause = failure_backoff(failures)
                bound.warning("fetch failed; retrying", error=f"{type(exc).__name__}: {exc}", pause=pause)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), pause)
                continue
            failures = 0
            for msg in msgs:
                message_key = (key(msg) if key else None) or ""
                # The keep-alive starts now, not when the handler starts: a message queued
                # behind a slow one of the same job must not reach its ack wait either.
                ticker = KeepAlive(msg, in_progress_every)
                tickers.add(ticker)
                queue.submit(message_key, _bind_work(msg, handler, ticker, tickers))
            if key is None:
                # Unkeyed: strictly one message after the other, batch after batch.
                await queue.join()
        await queue.close()
    finally:
        # Reached normally after draining, or on cancellation: never leave workers behind.
        await queue.close(cancel=True)
        await asyncio.gather(*(ticker.stop() for ticker in list(tickers)), return_exceptions=True)
        with contextlib.suppress(nats.errors.Error):
            await sub.unsubscribe()
        bound.info("consumer stopped")


async def _consumer_info(
    js: JetStreamContext, stream: str, durable: str, stop: asyncio.Event, bound: Any
) -> ConsumerInfo | None:
    """The consumer's info, waiting out a bus that is still (re)connecting or electing (a replica
    taking over as a NATS server is away gets "JetStream temporarily unavailable"); None if
    stopped first. A consumer still missing after ``MISSING_FOR`` seconds is a bug of the caller's
    (ValueError): a cluster's server that has just come back may not know it for a moment."""
    failures = 0
    missing_since: float | None = None
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        try:
            # A short timeout: while reconnecting, a request can be lost with the old socket.
            info: ConsumerInfo = await js.consumer_info(stream, durable, timeout=1.0)
            return info
        except NotFoundError as exc:
            missing_since = loop.time() if missing_since is None else missing_since
            if loop.time() - missing_since >= MISSING_FOR:
                raise ValueError(
                    f"no consumer {durable!r} on stream {stream!r}; call ensure_consumer first"
                ) from exc
            error = type(exc).__name__
        except TRANSIENT_ERRORS as exc:
            error = type(exc).__name__
        failures += 1
        pause = failure_backoff(failures)
        bound.warning("bus not answering yet; retrying", error=error, pause=pause)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), pause)
    return None


def _bind_work(
    msg: Msg, handler: Handler, ticker: KeepAlive, tickers: set[KeepAlive]
) -> Callable[[], Awaitable[None]]:
    async def work() -> None:
        try:
            await handle_message(msg, handler, keep_alive=ticker)
        finally:
            ticker.cancel()  # already stopped unless handle_message itself failed
            tickers.discard(ticker)

    return work
