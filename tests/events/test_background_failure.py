"""A background task of the gateway that raises (here the writer of delivery attempts) ends the
gateway with its error, so its supervisor starts it again, instead of vanishing while it serves."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from libs.backbone.connecting import Bus
from libs.backbone.natsserver import EmbeddedNats
from libs.web.serving import serve_until_stopped
from services.events.adapters.delivering import Deliveries
from services.events.app import build_app
from services.events.keys import DELIVERIES
from tests.events.support import settings
from tests.support.waiting import eventually, polled


def leaves(error: BaseException) -> list[BaseException]:
    """The errors inside a group (a task group's, or aiohttp's cleanup error), flattened."""
    inner = getattr(error, "exceptions", None)
    if inner is None:
        return [error]
    return [leaf for one in inner for leaf in leaves(one)]


async def test_a_background_task_that_raises_ends_the_gateway_with_its_error(
    topology: Bus, nats_server: EmbeddedNats, rest_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = asyncio.Event()

    async def writer_with_a_bug(self: Deliveries) -> None:
        await broken.wait()
        raise RuntimeError("a bug in the attempts' writer")

    monkeypatch.setattr(Deliveries, "_flush_forever", writer_with_a_bug)
    app = build_app(settings(nats_server.url, rest_url, tmp_path))
    stop = asyncio.Event()
    serving = asyncio.create_task(serve_until_stopped(app, "127.0.0.1", 0, stop, name="events gateway"))
    try:
        await eventually(polled(lambda: DELIVERIES in app), lambda up: up)
        broken.set()
        await asyncio.wait({serving}, timeout=15)
        assert serving.done(), "the gateway serves on without its task"
        error = serving.exception()
        assert error is not None
        assert "a bug in the attempts' writer" in [str(e) for e in leaves(error)]
    finally:
        stop.set()
        await asyncio.gather(serving, return_exceptions=True)
