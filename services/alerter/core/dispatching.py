"""Routing, inhibition, grouping and repeats, with Alertmanager's meaning.

A firing or resolved alert walks the route tree (first matching child wins unless it says
`continue`) to one or more receivers. Alerts for one route with equal `group_by` labels form
a group: the first notification waits `group_wait` to gather company, changes are sent at
most every `group_interval`, and an unchanged firing group is repeated every
`repeat_interval`. An alert already notified is not notified again until one of those says so,
which is what makes a duplicated event harmless. Inhibition mutes target alerts while a
matching source alert fires with the same values of the `equal` labels.

What each group last said is its `NotifiedRecord` (Alertmanager's notification log): every
notification carries the new record, the service stores it, and a dispatcher given the stored
records continues a group re-created after a restart where it stopped: alerts already notified
are not notified again, the repeat comes `repeat_interval` after the recorded time, and an
alert notified before the restart is still notified resolved.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from libs.alerting.config import AlertConfig, InhibitRule, Route
from services.alerter.core.evaluating import Alert

DEFAULT_GROUP_WAIT = 30.0
DEFAULT_GROUP_INTERVAL = 300.0
DEFAULT_REPEAT_INTERVAL = 4 * 3600.0
NOTIFICATION_LOG_RETENTION = 5 * 86400.0  # as Alertmanager's nflog; the KV bucket's TTL says the same


@dataclass(frozen=True)
class NotifiedRecord:
    """What a group last sent: the fingerprints it has told as firing (not yet as resolved), and when."""

    group_key: str
    receiver: str
    firing: tuple[str, ...]
    sent_at: float


@dataclass(frozen=True)
class Target:
    """Where a route sends an alert, with the timings it inherited."""

    path: str
    receiver: str
    group_by: tuple[str, ...]
    group_wait: float
    group_interval: float
    repeat_interval: float


@dataclass(frozen=True)
class Notification:
    receiver: str
    group_key: str
    group_labels: Mapping[str, str]
    firing: tuple[Alert, ...]
    resolved: tuple[Alert, ...]
    # Firing alerts this group had not told of before (actions run for these only).
    fresh: tuple[Alert, ...] = ()
    record: NotifiedRecord | None = None  # to store once the notification is delivered

    @property
    def status(self) -> str:
        return "firing" if self.firing else "resolved"


@dataclass
class _Group:
    target: Target
    labels: dict[str, str]
    created: float
    alerts: dict[str, Alert] = field(default_factory=dict)
    notified: dict[str, bool] = field(default_factory=dict)  # fingerprint -> was it resolved then
    last_flush: float | None = None
    last_notify: float | None = None


def _route_matches(route: Route, labels: Mapping[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in route.match.items()):
        return False
    return all(re.fullmatch(v, labels.get(k, "")) is not None for k, v in route.match_re.items())


def targets(
    route: Route, labels: Mapping[str, str], parent: Target | None = None, path: str = "0"
) -> list[Target]:
    """The receivers an alert reaches through ``route`` (already known to match)."""
    here = Target(
        path=path,
        receiver=route.receiver or (parent.receiver if parent else "default"),
        group_by=route.group_by if route.group_by is not None else (parent.group_by if parent else ()),
        group_wait=_pick(route.group_wait, parent.group_wait if parent else DEFAULT_GROUP_WAIT),
        group_interval=_pick(
            route.group_interval, parent.group_interval if parent else DEFAULT_GROUP_INTERVAL
        ),
        repeat_interval=_pick(
            route.repeat_interval, parent.repeat_interval if parent else DEFAULT_REPEAT_INTERVAL
        ),
    )
    found: list[Target] = []
    for index, child in enumerate(route.routes):
        if _route_matches(child, labels):
            found += targets(child, labels, here, f"{path}.{index}")
            if not child.continue_:
                break
    return found or [here]


def _pick(value: float | None, inherited: float) -> float:
    return inherited if value is None else value


def inhibited_by(alert: Alert, firing: Mapping[str, Alert], rules: tuple[InhibitRule, ...]) -> list[str]:
    """Fingerprints of the firing alerts that mute ``alert``."""
    sources: list[str] = []
    for rule in rules:
        if any(alert.labels.get(k) != v for k, v in rule.target_match.items()):
            continue
        for key, source in firing.items():
            if key == alert.fingerprint or any(
                source.labels.get(k) != v for k, v in rule.source_match.items()
            ):
                continue
            if all(source.labels.get(k, "") == alert.labels.get(k, "") for k in rule.equal):
                sources.append(key)
    return sources


class Dispatcher:
    def __init__(
        self,
        config: AlertConfig,
        records: Iterable[NotifiedRecord] = (),
        *,
        retention: float = NOTIFICATION_LOG_RETENTION,
    ) -> None:
        self.config = config
        self.groups: dict[str, _Group] = {}
        self.firing: dict[str, Alert] = {}
        self.retention = retention
        self.records: dict[str, NotifiedRecord] = {}
        self.restore(records)

    def restore(self, records: Iterable[NotifiedRecord]) -> None:
        """Adopt stored records (the newest per group wins); groups created later continue from them."""
        for record in records:
            known = self.records.get(record.group_key)
            if known is None or known.sent_at <= record.sent_at:
                self.records[record.group_key] = record

    def receive(self, alert: Alert, now: float) -> None:
        if alert.resolved:
            self.firing.pop(alert.fingerprint, None)
        else:
            self.firing[alert.fingerprint] = alert
        for target in targets(self.config.route, alert.labels):
            if "..." in target.group_by:
                group_labels = dict(alert.labels)
            else:
                group_labels = {k: alert.labels[k] for k in target.group_by if k in alert.labels}
            key = f"{target.path}:{target.receiver}:" + ",".join(
                f"{k}={v}" for k, v in sorted(group_labels.items())
            )
            group = self.groups.get(key)
            if group is None:
                record = self.records.get(key)
                told = record.firing if record is not None else ()
                if alert.resolved and alert.fingerprint not in told:
                    continue  # nothing was said about it here, so nothing to take back
                group = self.groups[key] = _Group(target, group_labels, now)
                if record is not None:
                    # Re-created (after a restart, or after it emptied): continue from its record.
                    group.notified = dict.fromkeys(record.firing, False)
                    group.last_notify = record.sent_at
            group.alerts[alert.fingerprint] = alert

    def inhibited(self, alert: Alert) -> list[str]:
        return inhibited_by(alert, self.firing, self.config.inhibit_rules)

    def flush(self, now: float) -> list[Notification]:
        """Notifications due at ``now``, in group order; the groups remember what they said."""
        out: list[Notification] = []
        for key in list(self.groups):
            group = self.groups[key]
            notification = self._flush_group(key, group, now)
            if notification is not None:
                out.append(notification)
            if not group.alerts:
                del self.groups[key]
        horizon = now - self.retention
        for key in [k for k, r in self.records.items() if r.sent_at < horizon and k not in self.groups]:
            del self.records[key]
        return out

    def _flush_group(self, key: str, group: _Group, now: float) -> Notification | None:
        target = group.target
        if group.last_flush is None:
            if now < group.created + target.group_wait:
                return None
        elif now < group.last_flush + target.group_interval:
            return None
        firing = [a for a in group.alerts.values() if not a.resolved and not self.inhibited(a)]
        resolved = [
            a for a in group.alerts.values() if a.resolved and group.notified.get(a.fingerprint) is False
        ]
        changed = any(group.notified.get(a.fingerprint) is not False for a in firing) or bool(resolved)
        repeat = (
            bool(firing)
            and group.last_notify is not None
            and now >= group.last_notify + target.repeat_interval
        )
        group.last_flush = now
        for alert in [a for a in group.alerts.values() if a.resolved]:
            del group.alerts[alert.fingerprint]
            group.notified.pop(alert.fingerprint, None)
        if not (changed or repeat):
            return None
        fresh = tuple(a for a in firing if a.fingerprint not in group.notified)
        for alert in firing:
            group.notified[alert.fingerprint] = False
        group.last_notify = now
        record = self.records[key] = NotifiedRecord(key, target.receiver, tuple(sorted(group.notified)), now)
        return Notification(
            target.receiver, key, dict(group.labels), tuple(firing), tuple(resolved), fresh, record
        )

    def next_due(self) -> float | None:
        """The earliest time a group may have something to send (for a service's sleep)."""
        times = [
            g.created + g.target.group_wait
            if g.last_flush is None
            else g.last_flush + g.target.group_interval
            for g in self.groups.values()
        ]
        return min(times) if times else None
