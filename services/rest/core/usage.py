"""Usage over a period, per user or per VC: what `GET /api/v2/usage` and `pai usage` report.

The SQL read model sums what needs every job (services/rest/adapters/usage.py); this module
reads the period a caller asks for, and turns the sums into the report: GPU-hours and
CPU-hours (each job's resources over all its tasks times the part of each attempt's running
time inside the period), the jobs that ended in the period by their final state, and the mean
wait from submission to first running of the jobs that first ran in it. Times come in as
arguments, as epoch milliseconds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from services.rest.core.states import FINAL

# What `by` groups by: the key each row of the report names.
BY = {"user": "user", "vc": "virtualCluster"}
FINAL_STATES = tuple(sorted(FINAL, key=("SUCCEEDED", "FAILED", "STOPPED").index))
DEFAULT_SPAN = "7d"
RELATIVE = re.compile(r"^\s*(\d{1,9})\s*([smhdw])\s*$")
UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
HOUR_MS = 3_600_000
# Dates before the epoch or beyond this one are no period of this platform's jobs.
LATEST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
TIME_FORMS = (
    "an ISO-8601 time such as 2026-11-21T09:00:00Z or 2026-11-21 (UTC unless it names an offset), "
    "a time before now such as 7d, 24h, 30m (units s, m, h, d, w), or now"
)


class UsageQueryError(ValueError):
    """A query parameter the report cannot read: which one, and what it accepts."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


@dataclass(frozen=True)
class Period:
    """[start, end) in epoch milliseconds; ``now`` bounds what still runs."""

    start_ms: int
    end_ms: int
    now_ms: int


def read_time(parameter: str, text: str, now_ms: int) -> int:
    """Epoch milliseconds of one ``from``/``to`` value, or UsageQueryError naming ``parameter``."""
    value = text.strip()
    if value.lower() == "now":
        return now_ms
    relative = RELATIVE.match(value)
    if relative:
        return max(0, now_ms - int(relative.group(1)) * UNIT_MS[relative.group(2)])
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise UsageQueryError(parameter, f"{parameter} must be {TIME_FORMS}; got {text!r}.") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    at = int(moment.timestamp() * 1000)
    if not 0 <= at <= LATEST_MS:
        raise UsageQueryError(parameter, f"{parameter} must be a time after 1970-01-01; got {text!r}.")
    return at


def read_period(start: str | None, end: str | None, now_ms: int) -> Period:
    """The period ``from``..``to`` names; by default the last 7 days up to now."""
    start_ms = read_time("from", start if start else DEFAULT_SPAN, now_ms)
    end_ms = read_time("to", end, now_ms) if end else now_ms
    if start_ms >= end_ms:
        raise UsageQueryError(
            "from",
            f"from must be before to; got from={iso(start_ms)} and to={iso(end_ms)}.",
        )
    return Period(start_ms, end_ms, now_ms)


def read_by(value: str | None) -> str:
    by = (value or "user").strip()
    if by not in BY:
        raise UsageQueryError("by", f"by must be one of user, vc; got {value!r}.")
    return by


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass
class _Group:
    gpu_milli_ms: float = 0.0
    cpu_ms: float = 0.0
    jobs_run: int = 0
    ended: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FINAL_STATES, 0))
    wait_ms: float = 0.0
    started: int = 0

    def add(self, other: _Group) -> None:
        self.gpu_milli_ms += other.gpu_milli_ms
        self.cpu_ms += other.cpu_ms
        self.jobs_run += other.jobs_run
        for state, count in other.ended.items():
            self.ended[state] += count
        self.wait_ms += other.wait_ms
        self.started += other.started

    def view(self) -> dict[str, Any]:
        return {
            "gpuHours": round(self.gpu_milli_ms / 1000 / HOUR_MS, 6),
            "cpuHours": round(self.cpu_ms / HOUR_MS, 6),
            "jobsRun": self.jobs_run,
            "jobs": dict(self.ended),
            "jobsStarted": self.started,
            "meanWaitSeconds": round(self.wait_ms / self.started / 1000, 3) if self.started else None,
        }


def report(
    by: str,
    period: Period,
    ran: Iterable[tuple[str, float | None, float | None, int]],
    ended: Iterable[tuple[str, str, int]],
    started: Iterable[tuple[str, float | None, int]],
) -> dict[str, Any]:
    """The report from the three sums the SQL gives, each per group key:

    ``ran``: (key, sum of GPU thousandths x ms, sum of CPU cores x ms, jobs that ran);
    ``ended``: (key, final state, jobs); ``started``: (key, sum of waits in ms, jobs).
    Rows come most GPU-hours first, then most CPU-hours, then by key.
    """
    groups: dict[str, _Group] = {}
    for key, gpu, cpu, jobs in ran:
        group = groups.setdefault(key, _Group())
        group.gpu_milli_ms += float(gpu or 0)
        group.cpu_ms += float(cpu or 0)
        group.jobs_run += int(jobs)
    for key, state, count in ended:
        if state in FINAL:
            groups.setdefault(key, _Group()).ended[state] += int(count)
    for key, wait, count in started:
        group = groups.setdefault(key, _Group())
        group.wait_ms += float(wait or 0)
        group.started += int(count)
    total = _Group()
    for group in groups.values():
        total.add(group)
    rows = [{BY[by]: key, **group.view()} for key, group in groups.items()]
    rows.sort(key=lambda row: (-row["gpuHours"], -row["cpuHours"], row[BY[by]]))
    return {
        "by": by,
        "from": period.start_ms,
        "to": period.end_ms,
        "fromTime": iso(period.start_ms),
        "toTime": iso(period.end_ms),
        "rows": rows,
        "total": total.view(),
    }
