"""docker-compose.yml: NATS with JetStream, PostgreSQL and every service, with the platform's env names."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
SERVICES = ("rest", "scheduler", "orchestrator", "monitor", "alerter", "events", "marketplace", "portal")
KNOWN_ENV = {
    "PAI_NATS_URL",
    "PAI_DATA_DIR",
    "PAI_SERVICE_NAME",
    "PAI_LOG_FORMAT",
    "PAI_REST_HOST",
    "PAI_REST_PORT",
    "PAI_PORTAL_HOST",
    "PAI_PORTAL_PORT",
    "PAI_PORTAL_REST_URL",
    "PAI_DATABASE_URL",
    "PAI_ADMIN_PASSWORD",
    "PAI_EXECUTOR",
    "PAI_EVENTS_URL",
    "PAI_EVENTS_HOST",
    "PAI_EVENTS_PORT",
    "PAI_MARKETPLACE_URL",
    "PAI_MARKETPLACE_HOST",
    "PAI_MARKETPLACE_PORT",
    "PAI_REST_URL",
}


@pytest.mark.parametrize("name", SERVICES)
def test_every_service_starts_from_its_module(name: str) -> None:
    service = COMPOSE["services"][name]
    assert service["command"] == ["python", "-m", f"services.{name}"]
    env = service["environment"]
    assert env["PAI_SERVICE_NAME"] == name
    assert env["PAI_NATS_URL"] == "nats://nats:4222"
    assert set(env) <= KNOWN_ENV
    assert service["depends_on"]["nats"]["condition"] == "service_healthy"


def test_nats_runs_jetstream_and_rest_uses_postgres() -> None:
    assert "--jetstream" in COMPOSE["services"]["nats"]["command"]
    rest = COMPOSE["services"]["rest"]
    assert rest["environment"]["PAI_DATABASE_URL"].startswith(
        "postgresql+asyncpg://pai:pai-dev@postgres:5432/"
    )
    assert rest["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert COMPOSE["services"]["orchestrator"]["environment"]["PAI_EXECUTOR"] == "local"


def test_the_images_are_built_from_the_dockerfiles_in_the_repository() -> None:
    for name in SERVICES:
        build = COMPOSE["services"][name]["build"]
        assert (ROOT / build["context"] / build["dockerfile"]).is_file()


def test_the_compose_file_validates_against_the_compose_schema() -> None:
    if (
        shutil.which("docker")
        and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    ):
        done = subprocess.run(
            ["docker", "compose", "-f", str(ROOT / "docker-compose.yml"), "config", "--quiet"],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        return
    if importlib.util.find_spec("compose_spec") is None:
        pytest.skip(
            "no compose schema here: neither `docker compose` nor the compose-spec package is installed "
            "(add compose-spec to the lock file to validate offline)"
        )
    from compose_spec import PyCompose  # type: ignore[import-not-found,unused-ignore]

    # YAML merge keys are YAML's business, not the compose schema's: resolve them first.
    resolved = yaml.safe_dump(yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8")))
    parsed = PyCompose.from_yaml(resolved)
    assert sorted(parsed.service_names()) == sorted(["nats", "postgres", *SERVICES])


@pytest.mark.parametrize("dockerfile", ["Dockerfile.services", "Dockerfile.runtime"])
def test_every_file_a_dockerfile_copies_exists_and_is_not_ignored(dockerfile: str) -> None:
    text = (ROOT / "docker" / dockerfile).read_text(encoding="utf-8")
    ignore = (ROOT / "docker" / f"{dockerfile}.dockerignore").read_text(encoding="utf-8").splitlines()
    kept = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    sources = [
        part
        for line in text.splitlines()
        if line.startswith("COPY ") and "--from=" not in line
        for part in line.split()[1:-1]
    ]
    assert sources
    for source in sources:
        assert (ROOT / source).exists(), source
        assert source.rstrip("/") in kept, f"{source} is excluded by the build context's ignore file"


def test_the_runtime_image_keeps_python_where_the_task_pod_copies_it_from(tmp_path: Path) -> None:
    from tests.k8s.test_pods import pod_dict

    text = (ROOT / "docker" / "Dockerfile.runtime").read_text(encoding="utf-8")
    final_stage = text.rsplit("FROM ", 1)[1]
    assert "COPY --from=build /usr/local /usr/local" in final_stage
    init = pod_dict(tmp_path)["spec"]["initContainers"][0]
    assert init["args"][0].startswith("find /usr/local -mindepth 1 -maxdepth 1 -exec cp -a -t /pai/python/ ")
