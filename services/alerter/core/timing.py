"""Clocks and durations: the only notion of time the alert engine has.

Rules say `for: 5m` and routes say `repeat_interval: 4h`; the engine compares such durations
with a `now` it is given. The service passes a wall clock, tests a `FakeClock` they advance,
so "fires after five minutes" is tested without waiting five minutes.
"""

from __future__ import annotations

import re
import time
from typing import Protocol

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


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


def parse_duration(value: str | float | int) -> float:
    """Seconds in a Prometheus-style duration ("90s", "5m", "1h30m") or a plain number."""
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    text = value.strip()
    if not text:
        raise ValueError("a duration cannot be empty; write e.g. 30s, 5m or 1h")
    position, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT[match.group(2)]
        position = match.end()
    if position != len(text):
        raise ValueError(f"{value!r} is not a duration; write e.g. 30s, 5m, 1h30m or 2d")
    return total
