"""A notification's delivery: a receiver that is down is one warning line, a bug in one is logged
with its traceback, and either way the receivers and actions after it are still served."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import aiohttp
import pytest
import structlog

from libs.alerting.config import ActionConfig, AlertConfig, EmailConfig, Receiver, Route
from libs.backbone.connecting import Bus
from services.alerter.core.dispatching import Notification
from services.alerter.core.evaluating import Alert
from services.alerter.handlers import Alerter

ALERT = Alert(labels={"alertname": "JobHung", "job_id": "j1"}, annotations={"summary": "hung"}, starts_at=0.0)


class _Email:
    def __init__(self, error: Exception) -> None:
        self.error = error

    async def send(self, config: EmailConfig, notification: Notification) -> bool:
        raise self.error


class _Actions:
    def __init__(self) -> None:
        self.stopped: list[str] = []

    async def stop_job(self, job_id: str, *, alert_id: str, reason: str) -> None:
        self.stopped.append(job_id)

    async def tag_job(self, job_id: str, tag: str, *, alert_id: str) -> None:
        raise AssertionError("not asked")

    async def cordon_node(self, node_name: str, *, alert_id: str, reason: str) -> None:
        raise AssertionError("not asked")


def _alerter(error: Exception) -> tuple[Alerter, _Actions]:
    receiver = Receiver(
        name="ops",
        email_configs=(EmailConfig(to="ops@example.com"),),
        actions=(ActionConfig(action="stop_job"),),
    )
    config = AlertConfig(route=Route(receiver="ops"), receivers=(receiver,))
    actions = _Actions()
    alerter = Alerter(cast(Bus, SimpleNamespace(js=None)), config=config, actions=actions)
    alerter.email = cast(Any, _Email(error))
    return alerter, actions


def _notification() -> Notification:
    return Notification("ops", "g", {}, firing=(ALERT,), resolved=(), fresh=(ALERT,))


@pytest.mark.parametrize("error", [OSError("connection refused"), aiohttp.ClientError("reset")])
async def test_a_receiver_that_is_down_is_one_warning_and_the_action_still_runs(error: Exception) -> None:
    alerter, actions = _alerter(error)
    with structlog.testing.capture_logs() as logs:
        await alerter._deliver(_notification())
    failed = [entry for entry in logs if entry["event"] == "alert email failed"]
    assert failed == [
        {
            "event": "alert email failed",
            "log_level": "warning",
            "receiver": "ops",
            "group": "g",
            "error": f"{type(error).__name__}: {error}",
        }
    ], logs
    assert actions.stopped == ["j1"]


async def test_a_bug_in_a_receiver_is_logged_with_its_traceback_and_the_action_still_runs() -> None:
    alerter, actions = _alerter(KeyError("a bug"))
    with structlog.testing.capture_logs() as logs:
        await alerter._deliver(_notification())
    failed = [entry for entry in logs if entry["event"] == "alert email failed"]
    assert len(failed) == 1, logs
    assert failed[0]["log_level"] == "error", logs
    assert failed[0].get("exc_info") is True, logs
    assert actions.stopped == ["j1"]
