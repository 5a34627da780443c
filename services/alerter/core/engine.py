"""The alert engine: events and samples in, alert transitions and notifications out.

`AlertEngine.step(now)` is the whole evaluation cycle: read the series, evaluate every rule,
hand fired and resolved alerts to the dispatcher, and return what must be published (alert
events) and sent (notifications). A new configuration takes effect at the next step; alerts
already firing keep their history because the evaluator and the groups are kept.

After a restart `restore` hands back what the last instance knew: the notification log (so no
group says again what it said) and the alerts then firing (so none is announced twice).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from libs.alerting.config import AlertConfig, dump_config
from libs.protocol.events import Event
from services.alerter.core.dispatching import Dispatcher, Notification, NotifiedRecord, targets
from services.alerter.core.evaluating import Alert, RuleEvaluator
from services.alerter.core.observing import Observer
from services.alerter.core.payloads import alert_json, api_alert
from services.alerter.core.series import SeriesStore

# Resolved alerts remembered for the alerts page ("recent"): at most this many, newest last.
RECENT_KEPT = 500


@dataclass
class StepResult:
    fired: list[Alert] = field(default_factory=list)
    resolved: list[Alert] = field(default_factory=list)
    notifications: list[Notification] = field(default_factory=list)
    restored: list[Alert] = field(default_factory=list)  # firing before a restart: not announced again


class AlertEngine:
    def __init__(self, config: AlertConfig, *, contacts: Mapping[str, str] | None = None) -> None:
        """``contacts``: user name -> registered address, read live (the caller keeps it current)."""
        self.config = config
        self.store = SeriesStore()
        self.observer = Observer(self.store, keep=config.settings.status_change_keep, contacts=contacts)
        self.evaluator = RuleEvaluator()
        self.dispatcher = Dispatcher(config)
        self.recent: deque[Alert] = deque(maxlen=RECENT_KEPT)
        self.stored_config = False  # True once a configuration from `pai alert-rules set` applies

    def restore(self, *, records: Iterable[NotifiedRecord], firing: Iterable[Alert], now: float) -> None:
        """What the previous instance knew; alerts it had firing get one `sample_ttl` to be met again."""
        self.dispatcher.restore(records)
        self.evaluator.restore(firing, until=now + self.config.settings.sample_ttl)

    def set_config(self, config: AlertConfig) -> None:
        self.config = config
        self.observer.keep = config.settings.status_change_keep
        self.dispatcher.config = config

    # -- inputs ---------------------------------------------------------------------------

    def observe(self, event: Event, now: float, *, replayed: bool = False) -> bool:
        """Apply a lifecycle event; True when it changed a job's state (worth evaluating at once)."""
        return self.observer.observe(event, now, replayed=replayed)

    def heartbeat(self, service: str, now: float) -> None:
        self.observer.heartbeat(service, now)

    def sample(self, name: str, labels: Mapping[str, str], value: float, now: float) -> None:
        """A metric sample from the monitor; job-scoped ones gain the job's owner, name and address."""
        job_id = labels.get("job_id")
        full = dict(labels) | (self.observer.job_labels(job_id) if job_id else {})
        self.store.set(name, full, value, expires_at=now + self.config.settings.sample_ttl)

    # -- the cycle -------------------------------------------------------------------------

    def step(self, now: float) -> StepResult:
        samples = list(self.store.samples(now))
        transitions = self.evaluator.evaluate(self.config.rules, samples, now)
        for alert in transitions.restored + transitions.fired + transitions.resolved:
            self.dispatcher.receive(alert, now)
        self.recent.extend(transitions.resolved)
        self.observer.prune(now)
        return StepResult(
            transitions.fired, transitions.resolved, self.dispatcher.flush(now), transitions.restored
        )

    # -- reading ---------------------------------------------------------------------------

    def firing(self, *, user: str | None, admin: bool, now: float) -> list[dict[str, Any]]:
        """Firing alerts in Alertmanager's API shape; a user sees only alerts labelled with them."""
        shown = []
        for alert in sorted(self.evaluator.firing(), key=lambda a: (a.starts_at, a.fingerprint)):
            if not admin and (user is None or alert.labels.get("user") != user):
                continue
            receivers = [t.receiver for t in targets(self.config.route, alert.labels)]
            shown.append(
                api_alert(alert, receivers=receivers, inhibited_by=self.dispatcher.inhibited(alert), now=now)
            )
        return shown

    def resolved_since(self, *, user: str | None, admin: bool, since: float) -> list[dict[str, Any]]:
        """Alerts resolved at ``since`` or later, newest first; a user sees only their own."""
        shown = []
        for alert in reversed(self.recent):
            if alert.ends_at is None or alert.ends_at < since:
                continue
            if not admin and (user is None or alert.labels.get("user") != user):
                continue
            shown.append(alert_json(alert))
        return shown

    def rules(self) -> dict[str, Any]:
        """The rules in effect, as configured, and whether they are stored or built in."""
        dumped = dump_config(self.config)
        return {
            "source": "stored" if self.stored_config else "built-in",
            "rules": dumped["rules"],
            "settings": dumped["settings"],
        }
