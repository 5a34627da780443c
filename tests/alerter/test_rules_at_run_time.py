"""Changing the alerting configuration while the alerter runs: `pai alert-rules` and the KV watch."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

from libs.backbone.connecting import Bus
from libs.backbone.natsserver import EmbeddedNats
from pai.cli.main import app
from services.alerter.adapters.rules_store import RULES_BUCKET, RULES_KEY, get_rules
from services.alerter.app import Alerter
from services.alerter.core.timing import FakeClock
from services.alerter.defaults import default_config
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


@pytest.mark.usefixtures("nats_server")
async def test_set_stores_only_a_valid_file(tmp_path: Path, bus: Bus, nats_server: EmbeddedNats) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(FAST)
    bad = tmp_path / "bad.yaml"
    bad.write_text("route: {receiver: nobody}\n")
    runner = CliRunner()
    refused = await asyncio.to_thread(
        runner.invoke, app, ["alert-rules", "set", str(bad), "--nats-url", nats_server.url]
    )
    assert refused.exit_code == 1
    assert "no receiver named 'nobody'" in refused.output
    stored = await asyncio.to_thread(
        runner.invoke, app, ["alert-rules", "set", str(good), "--nats-url", nats_server.url]
    )
    assert stored.exit_code == 0, stored.output
    assert await get_rules(bus.js) == FAST
