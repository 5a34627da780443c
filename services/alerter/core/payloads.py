"""What receivers and readers get: Alertmanager's webhook JSON, email text, the alerts list.

Shapes follow Alertmanager (webhook version "4"; the v2 API's alert objects) so tools written
for it, and users who know it, read ours unchanged. Email templates use `$name` placeholders
over the group's common labels plus `status`, `count` and `alerts` (one line per alert).
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from services.alerter.core.dispatching import Notification
from services.alerter.core.evaluating import Alert

DEFAULT_SUBJECT = "[$STATUS:$count] $alertname $group"
DEFAULT_TEXT = "$status_sentence\n\n$alerts\n"


def iso(seconds: float | None) -> str:
    if seconds is None:
        return "0001-01-01T00:00:00Z"
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def common(mappings: list[Mapping[str, str]]) -> dict[str, str]:
    if not mappings:
        return {}
    first = dict(mappings[0])
    return {k: v for k, v in first.items() if all(m.get(k) == v for m in mappings[1:])}


def alert_json(alert: Alert) -> dict[str, Any]:
    return {
        "status": "resolved" if alert.resolved else "firing",
        "labels": dict(alert.labels),
        "annotations": dict(alert.annotations),
        "startsAt": iso(alert.starts_at),
        "endsAt": iso(alert.ends_at),
        "generatorURL": "",
        "fingerprint": alert.fingerprint,
    }


def webhook_payload(
    notification: Notification, *, send_resolved: bool = True, max_alerts: int = 0, external_url: str = ""
) -> dict[str, Any] | None:
    """Alertmanager's webhook body, or None when nothing is left to send to this receiver."""
    alerts = list(notification.firing) + (list(notification.resolved) if send_resolved else [])
    if not alerts:
        return None
    shown = alerts[:max_alerts] if max_alerts else alerts
    return {
        "version": "4",
        "groupKey": notification.group_key,
        "truncatedAlerts": len(alerts) - len(shown),
        "status": notification.status,
        "receiver": notification.receiver,
        "groupLabels": dict(notification.group_labels),
        "commonLabels": common([a.labels for a in alerts]),
        "commonAnnotations": common([a.annotations for a in alerts]),
        "externalURL": external_url,
        "alerts": [alert_json(a) for a in shown],
    }


def _line(alert: Alert) -> str:
    state = "RESOLVED" if alert.resolved else "FIRING"
    summary = alert.annotations.get("summary") or ", ".join(
        f"{k}={v}" for k, v in sorted(alert.labels.items())
    )
    return f"- [{state}] {alert.name}: {summary} (since {iso(alert.starts_at)})"


def email_message(
    notification: Notification, *, subject: str | None, text: str | None, send_resolved: bool
) -> tuple[str, str] | None:
    """(subject, body) for an email receiver, or None when nothing is left to send."""
    alerts = list(notification.firing) + (list(notification.resolved) if send_resolved else [])
    if not alerts:
        return None
    labels = common([a.labels for a in alerts])
    status = notification.status if notification.firing else "resolved"
    group = " ".join(f"{k}={v}" for k, v in sorted(notification.group_labels.items()))
    if len(notification.firing) == 1 and len(alerts) == 1 and "summary" in alerts[0].annotations:
        sentence = alerts[0].annotations["summary"]
    else:
        sentence = f"{len(alerts)} alert(s) {status}."
    values = labels | {
        "status": status,
        "STATUS": status.upper(),
        "count": str(len(alerts)),
        "alertname": labels.get("alertname", "alerts"),
        "group": f"({group})" if group else "",
        "status_sentence": sentence,
        "alerts": "\n".join(_line(a) for a in alerts),
    }
    rendered_subject = string.Template(subject or DEFAULT_SUBJECT).safe_substitute(values)
    body = string.Template(text or DEFAULT_TEXT).safe_substitute(values)
    return " ".join(rendered_subject.split()), body


def api_alert(alert: Alert, *, receivers: list[str], inhibited_by: list[str], now: float) -> dict[str, Any]:
    """One alert as Alertmanager's v2 API lists it."""
    return {
        "labels": dict(alert.labels),
        "annotations": dict(alert.annotations),
        "startsAt": iso(alert.starts_at),
        "endsAt": iso(alert.ends_at),
        "updatedAt": iso(now),
        "generatorURL": "",
        "fingerprint": alert.fingerprint,
        "receivers": [{"name": name} for name in receivers],
        "status": {
            "state": "suppressed" if inhibited_by else "active",
            "silencedBy": [],
            "inhibitedBy": inhibited_by,
        },
    }
