"""Changing the alerting configuration while the alerter runs: the KV watch, and `pai alert-rules check`.

Storing it through the REST API (`pai alert-rules set`) is tested in tests/rest/test_alert_rules.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from typer.testing import CliRunner

from libs.alerting.defaults import default_config
from libs.backbone.connecting import Bus
from pai.cli.main import app
from services.alerter.adapters.rules_store import RULES_BUCKET, RULES_KEY
from services.alerter.core.timing import FakeClock
from services.alerter.handlers import Alerter
from tests.support.waiting import eventually

FAST = """
rules:
  - alert: PaiServiceDown
    expr: pai_service_heartbeat_age_seconds > 5
route: {receiver: ops, group_wait: 0s}
receivers: [{name: ops}]
"""


async def _configs(alerter: Alerter) -> int:
    return alerter.counts["configs"]


async def test_a_stored_configuration_applies_at_the_next_evaluation_and_bad_ones_are_skipped(
    bus: Bus,
) -> None:
    clock = FakeClock()
    stop = asyncio.Event()
    alerter = Alerter(bus, clock=clock)
    await alerter.start(stop)
    try:
        assert alerter.engine.config == default_config()
        alerter.engine.heartbeat("rest", clock.now())
        clock.advance(10)
        assert (await alerter.tick()).fired == []  # the built-in limit is 30 s
        kv = await bus.js.key_value(RULES_BUCKET.bucket)
        await kv.put(RULES_KEY, b"rules: [{alert: Bad, expr: 'nonsense'}]\n")
        await kv.put(RULES_KEY, FAST.encode())
        await eventually(lambda: _configs(alerter), lambda n: n >= 1)
        assert [r.alert for r in alerter.engine.config.rules] == ["PaiServiceDown"]
        assert [a.name for a in (await alerter.tick()).fired] == ["PaiServiceDown"]
    finally:
        stop.set()
        await alerter.close()


def test_check_reports_ok_or_every_problem(tmp_path: Path) -> None:
    runner = CliRunner()
    good = tmp_path / "good.yaml"
    good.write_text(FAST)
    result = runner.invoke(app, ["alert-rules", "check", str(good)])
    assert result.exit_code == 0, result.output
    assert "OK: 1 rules, 1 receivers" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - alert: X\n    expr: 'up >'\n    for: later\n")
    result = runner.invoke(app, ["alert-rules", "check", str(bad)])
    assert result.exit_code == 1
    assert "rules[0].expr" in result.output
    assert "rules[0].for" in result.output
