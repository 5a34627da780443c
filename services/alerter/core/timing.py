"""Clocks: the only notion of time the alert engine has.

Rules say `for: 5m` and routes say `repeat_interval: 4h` (read by libs/alerting/durations.py);
the engine compares such durations with a `now` it is given. The service passes a wall clock,
tests a `FakeClock` they advance, so "fires after five minutes" is tested without waiting.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class WallClock:
    def now(self) -> float:
        return time.time()


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        self._now += seconds
        return self._now
