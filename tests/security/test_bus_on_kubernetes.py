"""`pai deploy` makes the bus private too: NATS users per service, passwords only in a Secret."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nats.errors
import pytest
from nats.aio.client import Client as NATS

from libs.backbone.busauth import ADMIN_USER, OFF_THE_BUS, SECRETS_BUCKET, new_password, password_variable
from libs.backbone.connecting import connect
from libs.backbone.natsserver import EmbeddedNats
from pai.cli.deploying import CREDENTIALS, render

K8S = Path(__file__).resolve().parents[2] / "k8s"
SERVICES = {"rest", "scheduler", "orchestrator", "monitor", "alerter", "events", "marketplace"}


def rendered() -> list[dict[str, Any]]:
    return render(K8S / "overlays" / "small")


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def env_of(obj: dict[str, Any]) -> dict[str, Any]:
    [container] = obj["spec"]["template"]["spec"]["containers"]
    return {item["name"]: item for item in container.get("env", [])}


def test_each_service_pod_holds_only_its_own_bus_password() -> None:
    objects = rendered()
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    seen = set()
    for deployment in deployments:
        env = env_of(deployment)
        service = env["PAI_SERVICE_NAME"]["value"]
        if service in OFF_THE_BUS:  # a client of the API only: no bus user at all
            assert "PAI_NATS_USER" not in env
            assert "PAI_NATS_PASSWORD" not in env
            continue
        seen.add(service)
        assert env["PAI_NATS_USER"]["value"] == service
        ref = env["PAI_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": CREDENTIALS, "key": f"nats-{service}-password"}
    assert seen >= SERVICES
    nats_env = env_of(find(objects, "StatefulSet", "nats"))
    for user in {ADMIN_USER, *seen}:
        assert nats_env[password_variable(user)]["valueFrom"]["secretKeyRef"]["name"] == CREDENTIALS
    config = find(objects, "ConfigMap", "nats-config")["data"]["nats.conf"]
    assert "authorization" in config
    assert "pai-" not in config.split("authorization", 1)[1]  # no password, only variables


async def test_the_rendered_configuration_refuses_strangers_and_confines_services(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = find(rendered(), "ConfigMap", "nats-config")["data"]["nats.conf"]
    authorization = "authorization" + config.split("\nauthorization", 1)[1]
    passwords = {user: new_password() for user in {ADMIN_USER, *SERVICES}}
    for user, password in passwords.items():
        monkeypatch.setenv(password_variable(user), password)
    server = EmbeddedNats(tmp_path / "nats", authorization=authorization)
    server.start_sync()
    try:
        stranger = NATS()
        with pytest.raises(nats.errors.Error, match=r"(?i)authorization"):
            await stranger.connect(server.url, allow_reconnect=False, connect_timeout=2)
        await stranger.close()
        monitor = await connect(
            server.url, user="monitor", password=passwords["monitor"], initial_timeout=5, js_timeout=0.5
        )
        try:
            with pytest.raises((nats.errors.Error, TimeoutError)):
                await monitor.js.create_key_value(bucket=SECRETS_BUCKET)
        finally:
            await monitor.close()
        rest = await connect(server.url, user="rest", password=passwords["rest"], initial_timeout=5)
        try:
            kv = await rest.js.create_key_value(bucket=SECRETS_BUCKET)
            await kv.put("job1", b"sealed")
        finally:
            await rest.close()
    finally:
        server.kill_sync()


def test_only_rest_and_the_orchestrator_hold_the_secrets_key() -> None:
    holders = set()
    for deployment in (o for o in rendered() if o["kind"] == "Deployment"):
        env = env_of(deployment)
        if "PAI_SECRETS_KEY" in env:
            assert env["PAI_SECRETS_KEY"]["valueFrom"]["secretKeyRef"] == {
                "name": CREDENTIALS,
                "key": "secrets-key",
            }
            holders.add(env["PAI_SERVICE_NAME"]["value"])
    assert holders == {"rest", "orchestrator"}
