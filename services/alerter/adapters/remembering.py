"""What the alerter keeps across restarts: its notification log and the services it has heard.

Notification log (KV `PAI_ALERTER_NFLOG`, declared in the topology, values live 5 days as
Alertmanager's nflog): one record per group, written after each delivered notification, read
at start so a restarted alerter neither repeats what was said nor forgets to take it back.
Keys are hashes of the group key, since group keys hold characters KV keys may not.

Known services (KV `PAI_ALERTER_SERVICES`, no expiry): each service's last heartbeat time,
written at its first beat and then at most every `every` seconds. Heartbeats travel on core
NATS and are not stored, so this is the only way a restarted alerter learns of a service that
fell silent before it started; it then ages from the stored time, which may be early by at
most `every` (a service that died just after a write is seen down up to `every` sooner).
A retired service stays known until its key is deleted.
"""

from __future__ import annotations

import hashlib
import json
import re

import structlog
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from libs.backbone.kv import current_entries
from libs.backbone.provisioning import KVSpec, ensure_kv
from libs.backbone.topology import NOTIFICATION_LOG
from services.alerter.core.dispatching import NotifiedRecord

log = structlog.get_logger(__name__)

SERVICES_BUCKET = KVSpec(
    "PAI_ALERTER_SERVICES", description="services the alerter has heard, with their last heartbeat time"
)
_SAFE_KEY = re.compile(r"[-/_=.a-zA-Z0-9]+")


def record_key(group_key: str) -> str:
    return hashlib.sha256(group_key.encode()).hexdigest()[:32]


def service_key(service: str) -> str:
    return service if _SAFE_KEY.fullmatch(service) else "h." + hashlib.sha256(service.encode()).hexdigest()


async def _values(kv: KeyValue) -> list[bytes]:
    """Every current value of the bucket, read in one pass."""
    return [entry.value for entry in (await current_entries(kv)).values()]


class NotificationLog:
    def __init__(self, kv: KeyValue) -> None:
        self.kv = kv

    @classmethod
    async def open(cls, js: JetStreamContext) -> NotificationLog:
        return cls(await ensure_kv(js, NOTIFICATION_LOG))

    async def load(self) -> list[NotifiedRecord]:
        records = []
        for value in await _values(self.kv):
            try:
                data = json.loads(value)
                records.append(
                    NotifiedRecord(
                        group_key=str(data["group_key"]),
                        receiver=str(data["receiver"]),
                        firing=tuple(str(f) for f in data["firing"]),
                        sent_at=float(data["sent_at"]),
                    )
                )
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("unreadable notification record ignored", error=str(exc))
        return records

    async def put(self, record: NotifiedRecord) -> None:
        value = {
            "group_key": record.group_key,
            "receiver": record.receiver,
            "firing": list(record.firing),
            "sent_at": record.sent_at,
        }
        await self.kv.put(record_key(record.group_key), json.dumps(value).encode())


class KnownServices:
    def __init__(self, kv: KeyValue, *, every: float = 5.0) -> None:
        self.kv = kv
        self.every = every
        self._written: dict[str, float] = {}
        self._latest: dict[str, float] = {}

    @classmethod
    async def open(cls, js: JetStreamContext, *, every: float = 5.0) -> KnownServices:
        return cls(await ensure_kv(js, SERVICES_BUCKET), every=every)

    async def load(self) -> dict[str, float]:
        """Service name -> the last heartbeat time stored."""
        heard: dict[str, float] = {}
        for value in await _values(self.kv):
            try:
                data = json.loads(value)
                heard[str(data["service"])] = float(data["last_heard"])
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("unreadable known-service entry ignored", error=str(exc))
        self._written.update(heard)
        return heard

    def due(self, service: str, now: float) -> bool:
        last = self._written.get(service)
        return last is None or now - last >= self.every

    async def heard(self, service: str, now: float) -> None:
        """Store ``now`` as the service's last heartbeat if the stored one is `every` old."""
        self._latest[service] = max(now, self._latest.get(service, now))
        if self.due(service, now):
            await self._write(service, now)

    async def flush(self) -> None:
        """Store the exact last heartbeat of every service (at a clean stop)."""
        for service, latest in list(self._latest.items()):
            if latest > self._written.get(service, latest - 1):
                await self._write(service, latest)

    async def _write(self, service: str, heard: float) -> None:
        self._written[service] = heard
        value = json.dumps({"service": service, "last_heard": heard}).encode()
        await self.kv.put(service_key(service), value)
