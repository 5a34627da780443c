"""Framework state per job in the JetStream KV bucket PAI_FRAMEWORKS, written with revision checks.

A write names the revision it read; a concurrent writer (another replica, or this one racing
itself after a redelivery) makes it fail with KVConflictError, and the handler reads and
decides again. The state outlives the orchestrator process, which is what a restart recovers
from. Secrets are read from PAI_SECRETS (one JSON mapping per job id) and never written here.
"""

from __future__ import annotations

import json
from typing import Any

from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError

from libs.backbone.kv import ModelStore, Versioned
from libs.backbone.topology import FRAMEWORKS, SECRETS
from services.orchestrator.core.frameworks import Framework


class FrameworkStore:
    def __init__(self, store: ModelStore[Framework]) -> None:
        self._store = store

    @classmethod
    async def open(cls, js: JetStreamContext) -> FrameworkStore:
        return cls(await ModelStore.open(js, FRAMEWORKS.bucket, Framework))

    async def get(self, job_id: str) -> Versioned[Framework] | None:
        return await self._store.get(job_id)

    async def save(self, job_id: str, framework: Framework, revision: int | None) -> int:
        """Write `framework` if the key is still at `revision` (None: only if absent)."""
        if revision is None:
            return await self._store.create(job_id, framework)
        return await self._store.update(job_id, framework, revision)

    async def job_ids(self) -> list[str]:
        return await self._store.keys()


class SecretsReader:
    """The job's secrets as a mapping, straight from KV into the task's 0600 file."""

    def __init__(self, js: JetStreamContext) -> None:
        self._js = js

    async def __call__(self, job_id: str) -> dict[str, Any] | None:
        kv = await self._js.key_value(SECRETS.bucket)
        try:
            entry = await kv.get(job_id)
        except KeyNotFoundError:
            return None
        if not entry.value:
            return None
        data = json.loads(entry.value)
        return data if isinstance(data, dict) else None
