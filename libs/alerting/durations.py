"""Durations as alerting files write them: `for: 5m`, `repeat_interval: 4h`, `1h30m`.

Prometheus and Alertmanager spell durations this way, so their users read the platform's
alerting file without a manual; the file's loader and the alerter's engine both use this.
"""

from __future__ import annotations

import re

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


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
