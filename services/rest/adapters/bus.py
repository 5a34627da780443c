"""The REST service on the bus: its events out, secrets in KV, the projection consumer, log requests.

Built on ``libs.backbone`` (connection, provisioning, publish with Nats-Msg-Id, the durable
consume loop). The projection reads every ``pai.job.>`` event through the durable consumer
``rest-projection``; log content is not a fact, so it is asked of the orchestrator by
request/reply on ``pai.rpc.orchestrator.logs``.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

import nats.errors
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from libs.backbone.connecting import Bus
from libs.backbone.errors import TemporaryError
from libs.backbone.provisioning import ConsumerSpec, ensure_consumer, ensure_kv
from libs.backbone.sealing import SecretsCipher
from libs.backbone.topology import JOBS, SECRETS, ensure_topology, publish_event
from libs.protocol.events import EventBase
from libs.protocol.subjects import JOB_SUBJECTS, JOBS_STREAM, LOGS_RPC

PROJECTION_DURABLE = "rest-projection"
LOGS_SUBJECT = LOGS_RPC

PROJECTION = ConsumerSpec(
    JOBS_STREAM,
    PROJECTION_DURABLE,
    filter_subjects=(JOB_SUBJECTS,),
    description="the REST service's SQL read model of jobs",
)


class PublishFailedError(Exception):
    """The bus did not confirm a publish; the caller undoes what it prepared."""


class LogsUnavailableError(Exception):
    """The orchestrator did not answer a log request in time (or nobody listens)."""


@dataclass(frozen=True)
class RestBus:
    """What the REST service does on the bus, over one connection."""

    bus: Bus
    secrets: KeyValue
    # Job secrets are sealed before they reach the bucket (libs/backbone/sealing.py).
    cipher: SecretsCipher

    @classmethod
    async def provision(cls, bus: Bus, cipher: SecretsCipher, replicas: int | None = None) -> RestBus:
        """Make sure the streams, buckets and the projection consumer exist (idempotent)."""
        await ensure_topology(bus.js, replicas)
        assert JOBS.name == JOBS_STREAM
        await ensure_consumer(bus.js, PROJECTION)
        secrets = await ensure_kv(bus.js, SECRETS)
        return cls(bus=bus, secrets=secrets, cipher=cipher)

    async def publish(self, event: EventBase, *, ack_wait: float = 5.0) -> None:
        try:
            await publish_event(self.bus.js, event, ack_timeout=ack_wait)
        except (TemporaryError, nats.errors.Error, TimeoutError) as exc:
            raise PublishFailedError(f"{event.subject()}: {exc}") from exc

    async def put_secrets(self, job_id: str, values: dict[str, Any]) -> None:
        try:
            await self.secrets.put(job_id, self.cipher.seal(values))
        except (nats.errors.Error, TimeoutError) as exc:
            raise PublishFailedError(f"secrets of {job_id}: {exc}") from exc

    async def delete_secrets(self, job_id: str) -> None:
        # Purge, not delete: no revision of the secret stays behind in the bucket's history.
        with contextlib.suppress(nats.errors.Error, TimeoutError, KeyNotFoundError):
            await self.secrets.purge(job_id)

    async def request_logs(self, query: dict[str, Any], wait: float) -> dict[str, Any]:
        """Ask the orchestrator for a piece of a task's log; raises LogsUnavailableError."""
        try:
            reply = await self.bus.nc.request(LOGS_SUBJECT, json.dumps(query).encode(), timeout=wait)
        except (TimeoutError, nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
            raise LogsUnavailableError(type(exc).__name__) from exc
        answer: dict[str, Any] = json.loads(reply.data or b"{}")
        return answer
