"""A consumer starting while the bus elects: its first look at the consumer waits the bus out."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog
from nats.js.errors import NotFoundError, ServiceUnavailableError

from libs.backbone import consuming


class ElectingJetStream:
    """Answers a consumer's info after `errors` have been raised, one a call."""

    def __init__(self, errors: list[Exception], stop_at: tuple[int, asyncio.Event] | None = None) -> None:
        self.errors = list(errors)
        self.asked = 0
        self.stop_at = stop_at

    async def consumer_info(self, stream: str, durable: str, **_options: Any) -> Any:
        self.asked += 1
        if self.stop_at is not None and self.asked == self.stop_at[0]:
            self.stop_at[1].set()
        if self.errors:
            raise self.errors.pop(0)
        return ("info", stream, durable)


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(consuming, "failure_backoff", lambda _failures: 0.01)


def unavailable() -> ServiceUnavailableError:
    return ServiceUnavailableError(
        code=503, err_code=10008, description="JetStream system temporarily unavailable"
    )


def missing() -> NotFoundError:
    return NotFoundError(code=404, err_code=10014, description="consumer not found")


async def look(js: ElectingJetStream, stop: asyncio.Event | None = None) -> Any:
    return await consuming._consumer_info(
        js,  # type: ignore[arg-type]
        "PAI_JOBS",
        "rest-projection",
        stop or asyncio.Event(),
        structlog.get_logger("test"),
    )


async def test_jetstream_temporarily_unavailable_is_waited_out_not_raised() -> None:
    """A replica taking over while a NATS server is away gets 503s for a while: they are waited
    out (before, the first one ended the service, both REST replicas at once in a chaos run)."""
    js = ElectingJetStream([unavailable(), TimeoutError(), unavailable()])
    assert await look(js) == ("info", "PAI_JOBS", "rest-projection")
    assert js.asked == 4


async def test_a_consumer_missing_for_a_moment_is_waited_for() -> None:
    js = ElectingJetStream([missing(), missing()])
    assert await look(js) == ("info", "PAI_JOBS", "rest-projection")


async def test_a_consumer_that_stays_missing_is_the_callers_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(consuming, "MISSING_FOR", 0.05)
    js = ElectingJetStream([missing()] * 1000)
    expected = "no consumer 'rest-projection' on stream 'PAI_JOBS'; call ensure_consumer"
    with pytest.raises(ValueError, match=expected):
        await look(js)
    assert 1 < js.asked < 1000


async def test_a_stop_ends_the_wait() -> None:
    stop = asyncio.Event()
    js = ElectingJetStream([unavailable()] * 1000, stop_at=(3, stop))
    assert await look(js, stop) is None
    assert js.asked == 3
