"""The alerting configuration through the REST API, and `pai alert-rules` as its client.

The rules live where the alerter reads them (KV `PAI_ALERT_RULES`, key `config`); REST reads
and writes them there for admins. The CLI reaches the platform it is logged in to, never a NATS
address: with someone else's nats-server where the old default (`PAI_NATS_URL`) points, `show`
prints the platform's rules and `set` changes the platform's, and the stranger gets nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp.test_utils import TestClient
from typer.testing import CliRunner

from libs.alerting import default_text
from libs.backbone.connecting import Bus, connect
from libs.backbone.natsserver import EmbeddedNats
from pai.cli.main import app
from services.alerter.adapters.rules_store import get_rules, put_rules
from services.alerter.core.timing import FakeClock
from services.alerter.handlers import Alerter
from tests.rest.conftest import ADMIN_PASSWORD
from tests.rest.serving import ServerThread
from tests.support.waiting import eventually, polled

Client = TestClient[Any, Any]
RULES = "/api/v2/alert-rules"
YAML = {"Content-Type": "text/yaml"}

PLATFORM_RULES = """\
# the platform's own rules
rules:
  - alert: PaiServiceDown
    expr: pai_service_heartbeat_age_seconds > 5
route: {receiver: ops, group_wait: 0s}
receivers: [{name: ops}]
"""
STRANGER_RULES = """\
# someone else's rules, on someone else's bus
rules: []
route: {receiver: theirs}
receivers: [{name: theirs}]
"""
NEW_RULES = """\
rules:
  - alert: NodeNotReady
    expr: pai_node_count{ready!="true"} > 0
    for: 10m
  - alert: PaiServiceDown
    expr: pai_service_heartbeat_age_seconds > 30
route: {receiver: ops, group_wait: 0s}
receivers: [{name: ops}, {name: spare}]
inhibit_rules:
  - {source_match: {alertname: NodeNotReady}, target_match: {severity: warn}, equal: [node_name]}
"""

runner = CliRunner()


# -- the routes -----------------------------------------------------------------------------


async def test_admins_read_the_built_in_rules_until_they_store_valid_ones(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    answer = await api.get(RULES, headers=admin_headers)
    assert answer.status == 200
    assert answer.headers["X-Alert-Rules-Source"] == "built-in"
    assert answer.headers["X-Alert-Rules-Version"] == "0"
    assert await answer.text() == default_text()

    bad = "rules: [{alert: X, expr: 'up >', for: later}]\n"
    refused = await api.put(RULES, data=bad, headers={**admin_headers, **YAML})
    assert refused.status == 400
    body = await refused.json()
    assert body["code"] == "InvalidParametersError"
    assert [problem["path"] for problem in body["problems"]] == ["rules[0].expr", "rules[0].for"]
    assert "is not a duration" in body["problems"][1]["message"]
    assert await get_rules(bus.js) is None, "a refused file is not stored"

    stored = await api.put(RULES, data=NEW_RULES, headers={**admin_headers, **YAML})
    assert stored.status == 200, await stored.text()
    answer_body = await stored.json()
    assert answer_body["rules"] == 2
    assert (answer_body["receivers"], answer_body["inhibitRules"]) == (2, 1)
    assert await get_rules(bus.js) == NEW_RULES, "stored where the alerter reads it, as written"

    answer = await api.get(RULES, headers=admin_headers)
    assert answer.headers["X-Alert-Rules-Source"] == "stored"
    assert answer.headers["X-Alert-Rules-Version"] == str(answer_body["version"])
    assert await answer.text() == NEW_RULES


async def test_a_deeply_nested_body_is_refused_before_it_is_composed(
    api: Client, admin_headers: dict[str, str]
) -> None:
    answer = await api.put(RULES, data="[" * 100_000, headers={**admin_headers, **YAML})
    assert answer.status == 400
    assert "nested more than" in (await answer.json())["message"]


async def test_rules_put_through_rest_are_what_a_running_alerter_applies(
    api: Client, admin_headers: dict[str, str], bus: Bus
) -> None:
    stop = asyncio.Event()
    alerter = Alerter(bus, clock=FakeClock())
    await alerter.start(stop)
    try:
        stored = await api.put(RULES, data=NEW_RULES, headers={**admin_headers, **YAML})
        assert stored.status == 200, await stored.text()
        await eventually(polled(lambda: alerter.counts["configs"]), lambda n: n >= 1)
        assert [rule.alert for rule in alerter.engine.config.rules] == ["NodeNotReady", "PaiServiceDown"]
        assert alerter.engine.stored_config
    finally:
        stop.set()
        await alerter.close()


# -- the command line -----------------------------------------------------------------------


@pytest.fixture
def stranger(tmp_path: Path) -> Iterator[EmbeddedNats]:
    """Someone else's nats-server, holding rules of its own, where the old default points."""
    server = EmbeddedNats(tmp_path / "stranger")
    server.start_sync()
    try:
        asyncio.run(_on_bus(server.url, lambda bus: put_rules(bus.js, STRANGER_RULES)))
        yield server
    finally:
        server.kill_sync()


@pytest.fixture
def cli_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: ServerThread, stranger: EmbeddedNats
) -> Path:
    config = tmp_path / "config"
    monkeypatch.setenv("PAI_CONFIG_DIR", str(config))
    monkeypatch.delenv("PAI_SERVER", raising=False)
    monkeypatch.delenv("PAI_PASSWORD", raising=False)
    # What `set` and `show` once connected to by default (nats://127.0.0.1:4222): a bus not the platform's.
    monkeypatch.setenv("PAI_NATS_URL", stranger.url)
    for name in ("PAI_NATS_USER", "PAI_NATS_PASSWORD", "PAI_NATS_CA"):
        monkeypatch.delenv(name, raising=False)
    return config


async def _on_bus(url: str, call: Any) -> Any:
    bus = await connect(url, name="test", initial_timeout=10.0)
    try:
        return await call(bus)
    finally:
        await bus.close()


def platform_rules(server: ServerThread) -> str | None:
    result: str | None = asyncio.run(_on_bus(server.settings.nats_url, lambda bus: get_rules(bus.js)))
    return result


def stranger_rules(stranger: EmbeddedNats) -> str | None:
    result: str | None = asyncio.run(_on_bus(stranger.url, lambda bus: get_rules(bus.js)))
    return result


def pai(*args: str, password: str | None = None) -> tuple[int, str]:
    env = {"PAI_PASSWORD": password} if password else {}
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, result.output


def login(server: ServerThread, user: str = "admin", password: str = ADMIN_PASSWORD) -> None:
    code, output = pai("login", "--server", server.url, "--user", user, password=password)
    assert code == 0, output


def test_show_after_login_alone_prints_the_platforms_rules(
    cli_env: Path, server: ServerThread, stranger: EmbeddedNats
) -> None:
    asyncio.run(_on_bus(server.settings.nats_url, lambda bus: put_rules(bus.js, PLATFORM_RULES)))
    login(server)
    code, output = pai("alert-rules", "show")
    assert code == 0, output
    assert output == PLATFORM_RULES
    assert stranger_rules(stranger) == STRANGER_RULES


def test_show_says_when_the_built_in_rules_apply(cli_env: Path, server: ServerThread) -> None:
    login(server)
    code, output = pai("alert-rules", "show")
    assert code == 0, output
    assert output.startswith("# none stored: the alerter uses its built-in configuration")
    assert default_text() in output


def test_set_changes_the_platform_and_writes_nothing_to_another_bus(
    cli_env: Path, tmp_path: Path, server: ServerThread, stranger: EmbeddedNats
) -> None:
    login(server)
    bad = tmp_path / "bad.yaml"
    bad.write_text("route: {receiver: nobody}\n")
    code, output = pai("alert-rules", "set", str(bad))
    assert code == 1
    assert "no receiver named 'nobody'" in output
    assert platform_rules(server) is None

    good = tmp_path / "good.yaml"
    good.write_text(NEW_RULES)
    code, output = pai("alert-rules", "set", str(good))
    assert code == 0, output
    assert output.startswith("stored: 2 rules, 2 receivers, 1 inhibit rules (revision ")
    assert output.rstrip().endswith("); applied at the next evaluation")
    assert platform_rules(server) == NEW_RULES
    assert stranger_rules(stranger) == STRANGER_RULES, "the other bus is left as it was"
    code, output = pai("alert-rules", "show")
    assert (code, output) == (0, NEW_RULES)


def test_a_user_who_is_not_an_admin_is_refused(
    cli_env: Path, tmp_path: Path, server: ServerThread, stranger: EmbeddedNats
) -> None:
    token = httpx.post(
        f"{server.url}/api/v2/authn/basic/login", data={"username": "admin", "password": ADMIN_PASSWORD}
    ).json()["token"]
    created = httpx.post(
        f"{server.url}/api/v2/users",
        json={"username": "bob", "password": "bob-password-1"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert created.status_code == 201, created.text
    login(server, "bob", "bob-password-1")
    good = tmp_path / "good.yaml"
    good.write_text(NEW_RULES)
    code, output = pai("alert-rules", "set", str(good))
    assert code == 1
    assert "Only an administrator may change the alerting rules" in output
    assert "ForbiddenUserError" in output
    code, output = pai("alert-rules", "show")
    assert code == 1
    assert "Only an administrator may read the alerting rules" in output
    assert platform_rules(server) is None
    assert stranger_rules(stranger) == STRANGER_RULES


def test_without_a_login_set_and_show_refuse_and_name_pai_login(
    cli_env: Path, tmp_path: Path, server: ServerThread, stranger: EmbeddedNats
) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(NEW_RULES)
    for command in (["set", str(good)], ["show"]):
        code, output = pai("alert-rules", *command, "--server", server.url)
        assert code == 1, output
        assert f"not logged in to {server.url}; run `pai login --server {server.url}`" in output
    # The old bus options say what replaced them rather than going to a bus.
    code, output = pai("alert-rules", "set", str(good), "--nats-url", stranger.url)
    assert code == 2
    assert "`pai login --server URL --user ADMIN`" in output
    assert platform_rules(server) is None
    assert stranger_rules(stranger) == STRANGER_RULES
