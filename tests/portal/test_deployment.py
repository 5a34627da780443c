"""Where the portal is served: compose and the Kubernetes Ingress put it at / and the API beside it."""

from __future__ import annotations

from pathlib import Path

import yaml
from cryptography.fernet import Fernet

from services.portal.core.security import as_key
from tests.k8s.test_manifests import RENDERED, by

ROOT = Path(__file__).resolve().parents[2]


def test_the_ingress_serves_the_portal_at_the_root_and_the_api_beside_it() -> None:
    for objects in RENDERED.values():
        rules = by(objects, "Ingress", "pai")["spec"]["rules"][0]["http"]["paths"]
        backends = {rule["path"]: rule["backend"]["service"]["name"] for rule in rules}
        assert backends["/"] == "pai-portal"
        assert backends["/api"] == backends["/rest-server"] == "pai-rest"
        portal = by(objects, "Deployment", "pai-portal")["spec"]["template"]["spec"]["containers"][0]
        env = {item["name"]: item.get("value") for item in portal["env"]}
        assert env["PAI_PORTAL_REST_URL"] == "http://pai-rest.pai.svc"
        assert by(objects, "Service", "pai-portal")["spec"]["ports"][0]["targetPort"] == "http"


def test_compose_serves_the_portal_talking_to_rest() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    portal = compose["services"]["portal"]
    assert portal["environment"]["PAI_PORTAL_REST_URL"] == "http://rest:9186"
    assert portal["ports"] == ["8080:9187"]


def test_any_secret_becomes_a_session_key() -> None:
    key = Fernet.generate_key()
    assert as_key(key) == key
    derived = as_key(b"some operator secret")
    Fernet(derived)  # a valid key
    assert derived == as_key(b"some operator secret")
