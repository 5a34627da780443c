"""Evaluating rules the way Prometheus does: pending, then firing after `for`, then resolved.

Each rule is checked against every series of its metric. A series that meets the condition
makes an alert *pending*; once it has held for the rule's `for` duration the alert *fires*;
when the series no longer meets it (or disappears) a firing alert is *resolved* and a pending
one is forgotten. An alert's identity is its label set (the series' labels plus the rule's),
so the same condition seen twice is one alert, not two.

A restarted service hands `restore` the alerts that were firing when it stopped (from its own
alert.fired events). Such an alert, met again, is firing at once with its old start and is
reported as *restored*, not fired, so nothing announces it twice; one not met again by the end
of the grace (time for the samples to come back) is resolved. A series rebuilt from history
carries the time it began (`Sample.since`), so a `for` counts from then, not from the restart.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from libs.alerting.config import Rule
from services.alerter.core.series import Sample


def fingerprint(labels: Mapping[str, str]) -> str:
    """A stable, subject-safe id for a label set."""
    text = "\x00".join(f"{k}\x01{v}" for k, v in sorted(labels.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Alert:
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at: float
    ends_at: float | None = None
    value: float = 0.0

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "")

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.labels)

    @property
    def resolved(self) -> bool:
        return self.ends_at is not None


@dataclass
class _Active:
    labels: dict[str, str]
    annotations: dict[str, str]
    active_since: float
    value: float
    firing: bool = False


@dataclass
class Transitions:
    fired: list[Alert] = field(default_factory=list)
    resolved: list[Alert] = field(default_factory=list)
    restored: list[Alert] = field(default_factory=list)  # firing before a restart, met again


def render(template: str, labels: Mapping[str, str], value: float) -> str:
    """`$label` / `${label}` / `$value` substitution; unknown names stay as written."""
    values = dict(labels) | {"value": f"{value:g}"}
    return string.Template(template).safe_substitute(values)


class RuleEvaluator:
    """The active alerts of every rule, carried from one evaluation to the next."""

    def __init__(self) -> None:
        self._active: dict[str, dict[str, _Active]] = {}
        self._restored: dict[str, Alert] = {}
        self._restore_until = 0.0

    def restore(self, alerts: Iterable[Alert], *, until: float) -> None:
        """Alerts firing when the last instance stopped; those not met again by ``until`` resolve."""
        self._restored.update((a.fingerprint, a) for a in alerts if not a.resolved)
        self._restore_until = until

    def evaluate(self, rules: Iterable[Rule], samples: list[Sample], now: float) -> Transitions:
        out = Transitions()
        seen_rules: set[str] = set()
        by_metric: dict[str, list[Sample]] = {}
        for sample in samples:
            by_metric.setdefault(sample.name, []).append(sample)
        for rule in rules:
            seen_rules.add(rule.alert)
            condition = rule.condition
            active = self._active.setdefault(rule.alert, {})
            present: set[str] = set()
            for sample in by_metric.get(condition.metric, ()):
                if not condition.holds(sample.labels, sample.value):
                    continue
                labels = dict(sample.labels) | dict(rule.labels) | {"alertname": rule.alert}
                key = fingerprint(labels)
                present.add(key)
                annotations = {k: render(v, labels, sample.value) for k, v in rule.annotations.items()}
                current = active.get(key)
                if current is None:
                    since = now if sample.since is None else min(sample.since, now)
                    current = active[key] = _Active(labels, annotations, since, sample.value)
                    earlier = self._restored.pop(key, None)
                    if earlier is not None:
                        current.active_since, current.firing = earlier.starts_at, True
                        current.annotations = annotations
                        out.restored.append(self._alert(current))
                current.value, current.annotations = sample.value, annotations
                if not current.firing and now - current.active_since >= rule.for_:
                    current.firing = True
                    out.fired.append(self._alert(current))
            for key in [k for k in active if k not in present]:
                gone = active.pop(key)
                if gone.firing:
                    out.resolved.append(replace(self._alert(gone), ends_at=now))
        # A rule removed from the configuration resolves what it had fired.
        for name in [n for n in self._active if n not in seen_rules]:
            for gone in self._active.pop(name).values():
                if gone.firing:
                    out.resolved.append(replace(self._alert(gone), ends_at=now))
        if self._restored and now >= self._restore_until:
            # Gone while no instance was watching: say so now.
            out.resolved += [replace(a, ends_at=now) for a in self._restored.values()]
            self._restored.clear()
        return out

    @staticmethod
    def _alert(active: _Active) -> Alert:
        return Alert(dict(active.labels), dict(active.annotations), active.active_since, None, active.value)

    def firing(self) -> list[Alert]:
        return [self._alert(a) for rule in self._active.values() for a in rule.values() if a.firing]
