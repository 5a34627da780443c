"""Watching the job stream from a test: every event once, in order, with waits on what comes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from nats.aio.msg import Msg

from libs.protocol.events import Event, decode_event


class JobEvents:
    """Every event of the stream (deduplicated, in order), with waits on what comes next."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._changed = asyncio.Condition()

    async def on_msg(self, msg: Msg) -> None:
        async with self._changed:
            self.events.append(decode_event(msg.data))
            self._changed.notify_all()

    def of(self, type_: str, job_id: str | None = None) -> list[Any]:
        return [
            e
            for e in self.events
            if e.type == type_ and (job_id is None or getattr(e, "job_id", None) == job_id)
        ]

    async def wait_for(
        self,
        type_: str,
        job_id: str,
        where: Callable[[Any], bool] = lambda _e: True,
        count: int = 1,
        within: float = 60,
    ) -> list[Any]:
        async def ready() -> list[Any]:
            async with self._changed:
                while True:
                    found = [e for e in self.of(type_, job_id) if where(e)]
                    if len(found) >= count:
                        return found
                    await self._changed.wait()

        try:
            return await asyncio.wait_for(ready(), within)
        except TimeoutError:
            seen = [(e.type, getattr(e, "job_id", "")) for e in self.events]
            raise AssertionError(f"no {count}x {type_} for {job_id} within {within}s; saw {seen}") from None
