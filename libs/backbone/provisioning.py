"""Declaring the streams, durable consumers and KV buckets a service relies on.

Each service declares what it needs as small frozen specs and calls ``ensure_*`` at start:
creating what is missing and updating what differs, so a new version's settings roll out by
restarting, and two replicas starting together cannot fail each other (JetStream accepts a
create with an identical configuration as a no-op, and a consumer create is create-or-update).
Streams are file-stored with a duplicate window so ``Nats-Msg-Id`` deduplicates retries.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import structlog
from nats.js import JetStreamContext, api
from nats.js.errors import APIError, BadRequestError, NotFoundError, ServiceUnavailableError
from nats.js.kv import KeyValue

from libs.backbone.errors import ProvisioningError
from libs.protocol.subjects import JOBS_STREAM

log = structlog.get_logger(__name__)

# JetStream API error codes (server/errors.json).
_STREAM_NAME_IN_USE = 10058


@dataclass(frozen=True)
class StreamSpec:
    """A stream: its subjects, how long it keeps messages, and its deduplication window."""

    name: str
    subjects: tuple[str, ...]
    duplicate_window: float = 120.0  # seconds in which a repeated Nats-Msg-Id is dropped
    max_age: float | None = None  # seconds; None keeps messages until limits say otherwise
    max_bytes: int | None = None
    max_msgs_per_subject: int = -1
    replicas: int = 1
    retention: api.RetentionPolicy = api.RetentionPolicy.LIMITS
    description: str | None = None

    def to_config(self) -> api.StreamConfig:
        return api.StreamConfig(
            name=self.name,
            description=self.description,
            subjects=list(self.subjects),
            retention=self.retention,
            storage=api.StorageType.FILE,
            num_replicas=self.replicas,
            duplicate_window=self.duplicate_window,
            max_age=self.max_age,
            max_bytes=self.max_bytes,
            max_msgs_per_subject=self.max_msgs_per_subject,
            discard=api.DiscardPolicy.OLD,
            # A message read by subject (a job's submission, say) is answered without an API call.
            allow_direct=True,
        )


@dataclass(frozen=True)
class ConsumerSpec:
    """A durable pull consumer with explicit acks.

    ``max_ack_pending=1`` makes delivery strictly sequential across the whole consumer (one
    message outstanding at a time); per-job ordering with many jobs in parallel is better had
    with ``consume(..., key=...)``, which keeps per-key order inside one process.
    """

    stream: str
    durable: str
    filter_subjects: tuple[str, ...] = ()
    ack_wait: float = 30.0  # seconds before an unacknowledged message is redelivered
    max_deliver: int = -1  # -1: retry forever; handlers end hopeless retries with PermanentError
    max_ack_pending: int = 1000
    backoff: tuple[float, ...] = ()  # redelivery delays after ack_wait expiries, in seconds
    deliver_policy: api.DeliverPolicy = api.DeliverPolicy.ALL
    description: str | None = None

    def to_config(self) -> api.ConsumerConfig:
        filter_subject: str | None = None
        filter_subjects: list[str] | None = None
        if len(self.filter_subjects) == 1:
            filter_subject = self.filter_subjects[0]
        elif self.filter_subjects:
            filter_subjects = list(self.filter_subjects)
        return api.ConsumerConfig(
            name=self.durable,
            durable_name=self.durable,
            description=self.description,
            deliver_policy=self.deliver_policy,
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait,
            max_deliver=self.max_deliver,
            max_ack_pending=self.max_ack_pending,
            backoff=list(self.backoff) or None,
            filter_subject=filter_subject,
            filter_subjects=filter_subjects,
        )


@dataclass(frozen=True)
class KVSpec:
    """A KV bucket; ``history`` > 1 keeps earlier revisions for audit or debugging."""

    bucket: str
    history: int = 1
    ttl: float | None = None  # seconds a value lives; None: forever
    max_bytes: int | None = None
    replicas: int = 1
    description: str | None = None

    def to_config(self) -> api.KeyValueConfig:
        return api.KeyValueConfig(
            bucket=self.bucket,
            description=self.description,
            history=self.history,
            ttl=self.ttl,
            max_bytes=self.max_bytes,
            storage=api.StorageType.FILE,
            replicas=self.replicas,
            # Reads go through the server's direct-get path: no JetStream API request (and no
            # API advisory) per read, which a key read on every job event would otherwise cost.
            direct=True,
        )


async def ensure_stream(
    js: JetStreamContext, spec: StreamSpec, *, replicas: int | None = None
) -> api.StreamInfo:
    """Create the stream, or update it to match ``spec``; a no-op when it already matches.

    ``replicas`` overrides the spec's count; None creates with the job stream's (one setting
    replicates everything, libs/backbone/topology.py) and keeps an existing stream's.
    """
    config = spec.to_config()
    config.num_replicas = replicas or await _replicas_like_jobs(js, spec.replicas)
    try:
        info = await js.add_stream(config)
        log.debug("stream ensured", stream=spec.name)
        return info
    except BadRequestError as exc:
        if exc.err_code != _STREAM_NAME_IN_USE:
            raise ProvisioningError(f"stream {spec.name!r}: {exc.description}") from exc
    if replicas is None:
        with contextlib.suppress(NotFoundError):
            config.num_replicas = (await js.stream_info(spec.name)).config.num_replicas
    try:
        info = await js.update_stream(config)
    except APIError as exc:
        raise ProvisioningError(
            f"stream {spec.name!r} exists with a configuration that cannot change in place: "
            f"{exc.description}; delete the stream or keep its old settings"
        ) from exc
    log.info("stream updated", stream=spec.name)
    return info


async def ensure_consumer(js: JetStreamContext, spec: ConsumerSpec) -> api.ConsumerInfo:
    """Create the durable consumer or update it to match ``spec`` (the server's create-or-update)."""
    try:
        return await js.add_consumer(spec.stream, spec.to_config())
    except ServiceUnavailableError:
        raise  # the cluster electing a leader: the caller may ask again (topology.py's patiently)
    except APIError as exc:
        raise ProvisioningError(
            f"consumer {spec.durable!r} on stream {spec.stream!r}: {exc.description}"
        ) from exc


async def _replicas_like_jobs(js: JetStreamContext, default: int) -> int:
    """The job stream's replica count where it exists (a service creating a bucket of its own
    follows the topology that PAI_STREAM_REPLICAS set up), else `default`."""
    try:
        return (await js.stream_info(JOBS_STREAM)).config.num_replicas or default
    except NotFoundError:
        return default


async def ensure_kv(js: JetStreamContext, spec: KVSpec, *, replicas: int | None = None) -> KeyValue:
    """Create the bucket, or update its backing stream's limits to match ``spec``.

    ``replicas`` as for ``ensure_stream``: None creates with the job stream's count and keeps an
    existing bucket's.
    """
    config = spec.to_config()
    config.replicas = replicas or await _replicas_like_jobs(js, spec.replicas)
    try:
        return await js.create_key_value(config)
    except BadRequestError as exc:
        if exc.err_code != _STREAM_NAME_IN_USE:
            raise ProvisioningError(f"KV bucket {spec.bucket!r}: {exc.description}") from exc
    # The bucket exists with other limits: change only what a KVSpec governs.
    stream = f"KV_{spec.bucket}"
    try:
        current = (await js.stream_info(stream)).config
    except NotFoundError as exc:  # deleted between the two calls
        raise ProvisioningError(f"KV bucket {spec.bucket!r} vanished while being updated") from exc
    wanted = current.evolve(
        description=spec.description,
        max_msgs_per_subject=spec.history,
        max_age=spec.ttl,
        max_bytes=spec.max_bytes,
        num_replicas=replicas or current.num_replicas,
        allow_direct=True,
    )
    try:
        await js.update_stream(wanted)
    except APIError as exc:
        raise ProvisioningError(f"KV bucket {spec.bucket!r} cannot be updated: {exc.description}") from exc
    log.info("kv bucket updated", bucket=spec.bucket)
    return await js.key_value(spec.bucket)
