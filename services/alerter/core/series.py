"""The engine's view of the world: labelled series built from events, samples and heartbeats.

Rules are conditions on series, so every input is turned into one: a `job.pending` event sets
`pai_job_pending{job_id,...} 1`, a node report sets `pai_node_count{node_name,ready}`, a
heartbeat records when a service was last heard and shows as an age at evaluation time, and
metric samples from the monitor are stored as they come. Setting a series again changes
nothing, so a redelivered event cannot alter a decision. A series rebuilt from past events
keeps the time it began (`since`) while its value stays the same.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass

LabelSet = tuple[tuple[str, str], ...]


def label_set(labels: Mapping[str, str]) -> LabelSet:
    return tuple(sorted(labels.items()))


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float
    since: float | None = None  # when it took this value, if known (rebuilt from history)


@dataclass
class _Value:
    value: float
    expires_at: float | None
    since: float | None = None


Key = tuple[str, LabelSet]
INDEXED_LABEL = "job_id"
"""Value series are also found by this label: a job's end removes its series without a scan of all."""


def _indexed(labels: LabelSet) -> str | None:
    for label, value in labels:
        if label == INDEXED_LABEL:
            return value
    return None


class SeriesStore:
    """Values by (name, labels); "touch" series report their age in seconds when read."""

    def __init__(self) -> None:
        self._values: dict[Key, _Value] = {}
        self._touched: dict[Key, float] = {}
        self._by_job: dict[str, set[Key]] = {}

    def _candidates(self, match: Mapping[str, str]) -> list[Key]:
        if INDEXED_LABEL in match:
            return list(self._by_job.get(match[INDEXED_LABEL], ()))
        return list(self._values)

    def _drop(self, key: Key) -> None:
        del self._values[key]
        job = _indexed(key[1])
        if job is not None:
            keys = self._by_job.get(job)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_job[job]

    def set(
        self,
        name: str,
        labels: Mapping[str, str],
        value: float,
        *,
        expires_at: float | None = None,
        since: float | None = None,
    ) -> None:
        key = (name, label_set(labels))
        held = self._values.get(key)
        if held is not None and held.value == value and held.since is not None:
            since = held.since if since is None else min(since, held.since)
        self._values[key] = _Value(value, expires_at, since)
        if held is None:
            job = _indexed(key[1])
            if job is not None:
                self._by_job.setdefault(job, set()).add(key)

    def delete(self, name: str, **match: str) -> int:
        """Remove every series of ``name`` whose labels include ``match``; returns how many."""
        doomed = [key for key in self._candidates(match) if key[0] == name and _includes(key[1], match)]
        for key in doomed:
            self._drop(key)
        return len(doomed)

    def delete_labelled(self, sparing: Collection[str] = (), /, **match: str) -> int:
        """Remove every value series (of any name but those ``sparing``) whose labels include ``match``."""
        doomed = [
            key for key in self._candidates(match) if key[0] not in sparing and _includes(key[1], match)
        ]
        for key in doomed:
            self._drop(key)
        return len(doomed)

    def touch(self, name: str, labels: Mapping[str, str], now: float) -> None:
        key = (name, label_set(labels))
        self._touched[key] = max(now, self._touched.get(key, now))

    def samples(self, now: float) -> Iterator[Sample]:
        """Every live series at ``now``; expired values are dropped on the way."""
        for key in [k for k, v in self._values.items() if v.expires_at is not None and v.expires_at <= now]:
            self._drop(key)
        for (name, labels), held in self._values.items():
            yield Sample(name, dict(labels), held.value, held.since)
        for (name, labels), seen in self._touched.items():
            yield Sample(name, dict(labels), max(0.0, now - seen))

    def get(self, name: str, labels: Mapping[str, str]) -> float | None:
        held = self._values.get((name, label_set(labels)))
        return None if held is None else held.value


def _includes(labels: LabelSet, match: Mapping[str, str]) -> bool:
    have = dict(labels)
    return all(have.get(k) == v for k, v in match.items())
