"""The scheduler's VC status is never read half-way through its replay of the streams.

Right after a start the scheduler replays the job stream to learn what runs; a status answered
before the replay ends showed running jobs as using nothing (a restart test read 0 GPUs where 12
were in use, whenever the machine was slow enough). Until the replay ends it answers "rebuilding".
"""

from __future__ import annotations

import json
from typing import Any, cast

from nats.aio.msg import Msg

from libs.backbone.connecting import Bus
from libs.protocol.subjects import JOBS_STREAM
from services.scheduler.core.hived import HivedPolicy
from services.scheduler.core.queueing import SchedulerCore
from services.scheduler.handlers import SchedulerService


class Request:
    def __init__(self) -> None:
        self.answers: list[Any] = []

    async def respond(self, data: bytes) -> None:
        self.answers.append(json.loads(data))


async def test_status_waits_for_the_replay_then_answers() -> None:
    service = SchedulerService(cast(Bus, None), SchedulerCore(HivedPolicy(None)))
    service._catch_up[JOBS_STREAM] = 12  # the stream's last message when the replay began
    asked = Request()
    await service.answer_status(cast(Msg, asked))
    assert asked.answers[-1]["error"] == "unavailable"
    assert "rebuilding" in asked.answers[-1]["message"]

    del service._catch_up[JOBS_STREAM]  # as _absorb does on reaching that message
    await service.answer_status(cast(Msg, asked))
    assert isinstance(asked.answers[-1], list), "the status itself"
