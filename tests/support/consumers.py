"""Running a consume loop in the background of a test and always stopping it.

``running_consumer`` starts ``consume`` as a task and, on leaving the block, sets its stop
event and awaits it, so a test never leaks a loop and any error inside the loop fails the test.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from nats.js import JetStreamContext

from libs.backbone.consuming import Handler, consume


@dataclass
class RunningConsumer:
    task: asyncio.Task[None]
    stop: asyncio.Event


@asynccontextmanager
async def running_consumer(
    js: JetStreamContext, stream: str, durable: str, handler: Handler, **options: Any
) -> AsyncIterator[RunningConsumer]:
    stop = asyncio.Event()
    # A short fetch keeps stopping quick; services keep the longer default.
    options.setdefault("fetch_timeout", 0.25)
    task = asyncio.create_task(consume(js, stream, durable, handler, stop=stop, **options))
    running = RunningConsumer(task=task, stop=stop)
    try:
        yield running
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
