"""Retry loops wait out the bus's errors, timeouts and OS errors (TRANSIENT_ERRORS) and nothing
else: a bug raises out of the loop, with its traceback, so the service stops and its supervisor
starts it again, instead of a warning repeated for ever."""

from __future__ import annotations

import asyncio
from typing import Any

import nats.errors
import pytest
from nats.js.kv import KeyValue

from libs.backbone.errors import TRANSIENT_ERRORS, TemporaryError
from libs.backbone.kv import KeyWatch


def test_the_transient_errors_are_the_bus_s_timeouts_and_the_os_s() -> None:
    for error in (
        nats.errors.NoServersError(),
        nats.errors.TimeoutError(),
        TimeoutError(),
        ConnectionResetError(),
        TemporaryError(),
    ):
        assert isinstance(error, TRANSIENT_ERRORS)
    for bug in (KeyError("x"), AttributeError("y"), TypeError(), ValueError()):
        assert not isinstance(bug, TRANSIENT_ERRORS)


class Opens:
    """An open_bucket that fails as told, one error per call."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> KeyValue:
        self.calls += 1
        raise self.errors.pop(0)


async def test_a_key_watch_retries_the_bus_going_away_and_stops_on_a_bug() -> None:
    opens = Opens(nats.errors.NoServersError(), ConnectionRefusedError(), KeyError("a bug"))
    applied: list[Any] = []
    watch = KeyWatch(opens, ">", lambda *change: applied.append(change), what="a test", retry_after=0)
    with pytest.raises(KeyError, match="a bug"):
        await asyncio.wait_for(watch.run(), 10)
    assert opens.calls == 3  # two retried, the third raised
