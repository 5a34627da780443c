"""Driving a whole embedded platform from a test: start it, talk REST, await bus events."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import nats
from nats.aio.client import Client as NATS

from libs.backbone.consuming import subscribe_ordered
from libs.protocol.events import JobCompleted
from pai.embedded.platform import EmbeddedPlatform, PlatformInfo, free_port
from tests.support.events import JobEvents
from tests.support.waiting import eventually

ADMIN_PASSWORD = "e2e-admin-pass"
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
# The `pai` command of this checkout, whatever is installed on the PATH.
PAI = (sys.executable, "-c", "from pai.cli.main import main; main()")
UNLIMITED = 10_000_000


class Platform:
    """A running platform with an admin REST client and a bus watcher."""

    def __init__(
        self, embedded: EmbeddedPlatform, info: PlatformInfo, api: httpx.AsyncClient, nc: NATS
    ) -> None:
        self.embedded = embedded
        self.info = info
        self.api = api
        self.nc = nc
        self.watcher = JobEvents()

    async def submit(self, yaml_text: str) -> str:
        response = await self.api.post(
            "/api/v2/jobs", content=yaml_text, headers={"Content-Type": "text/yaml"}
        )
        assert response.status_code == 202, response.text
        return str(response.json()["jobId"])

    async def completed(self, job_id: str, within: float = 90.0) -> JobCompleted:
        [event] = await self.watcher.wait_for("job.completed", job_id, within=within)
        assert isinstance(event, JobCompleted)
        return event

    async def detail(self, name: str, final: bool = True) -> dict[str, Any]:
        """Job detail from REST; with `final`, once the read model shows the final state."""

        async def probe() -> dict[str, Any]:
            response = await self.api.get(f"/api/v2/jobs/admin~{name}")
            return dict(response.json()) if response.status_code == 200 else {}

        def ready(detail: dict[str, Any]) -> bool:
            state = detail.get("jobStatus", {}).get("state")
            return state in ("SUCCEEDED", "FAILED", "STOPPED") if final else state is not None

        return await eventually(probe, ready, within=30)

    async def log(self, name: str, role: str, index: int, attempt: int = 0, file: str = "all") -> str:
        task = f"/api/v2/jobs/admin~{name}/attempts/{attempt}/taskRoles/{role}/taskIndex/{index}"
        path = f"{task}/attempts/0/logs/{file}"
        response = await self.api.get(path)
        assert response.status_code == 200, response.text
        body = response.json()
        return str(body["content"] if isinstance(body, dict) else body)

    def child(self, name: str) -> Any:
        assert self.embedded.supervisor is not None
        return next(c for c in self.embedded.supervisor.children if c.name == name)


class Cli:
    """The `pai` command as a user runs it: its own process, its own config dir, one server."""

    def __init__(self, server: str, config_dir: Path) -> None:
        self.env = {
            **os.environ,
            "PAI_SERVER": server,
            "PAI_CONFIG_DIR": str(config_dir),
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "COLUMNS": "200",
        }
        self.env.pop("PAI_PASSWORD", None)

    async def start(self, *args: str, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
        """`pai ARGS...` started, with stdout and stderr as pipes."""
        return await asyncio.create_subprocess_exec(
            *PAI,
            *args,
            cwd=REPO,
            env={**self.env, **(env or {})},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )

    async def run(self, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
        """`pai ARGS...` to its end: exit code, stdout, stderr."""
        process = await self.start(*args, env=env)
        out, err = await process.communicate()
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()


@asynccontextmanager
async def running_platform(
    data_dir: Path,
    *,
    api_per_min: int | None = UNLIMITED,
    task_user: str = "none",
    env: dict[str, str] | None = None,
) -> AsyncIterator[Platform]:
    # The tests poll job details every few milliseconds from one address: far more than OpenPAI's
    # 600 requests a minute, so that limit is raised here (still counted, never hit) unless a
    # test asks for another one, or for the platform's own (None).
    # Their tasks write to the test's own temporary folder, which only root may enter: they run
    # as the platform's user unless a test asks otherwise (tests/security runs them as pai-task).
    embedded = EmbeddedPlatform(
        data_dir,
        api_port=free_port(),
        admin_password=ADMIN_PASSWORD,
        extra_env={
            "PAI_TASK_USER": task_user,
            **({} if api_per_min is None else {"PAI_RATE_LIMIT_API_PER_MIN": str(api_per_min)}),
            **(env or {}),
        },
    )
    try:
        info = await embedded.start()
        async with httpx.AsyncClient(base_url=info.api_url, timeout=30) as api:
            login = await api.post(
                "/api/v2/authn/basic/login", json={"username": "admin", "password": ADMIN_PASSWORD}
            )
            assert login.status_code == 200, login.text
            api.headers["Authorization"] = f"Bearer {login.json()['token']}"
            nc = await nats.connect(
                info.nats_url,
                **info.nats_options(),
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.2,
            )
            platform = Platform(embedded, info, api, nc)
            # The stream, not the bare subject: what the bus deduplicated is seen once.
            await subscribe_ordered(nc.jetstream(), "pai.job.>", cb=platform.watcher.on_msg)
            try:
                yield platform
            finally:
                # nats-py's close() may wait forever on a TLS connection that failed (a test
                # that took the bus's port); the platform's stop ends it anyway.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(nc.close(), 5)
    finally:
        await embedded.stop()


def job_yaml(name: str, roles: dict[str, dict[str, Any]], **top: Any) -> str:
    """A protocol v2 job; each role gives `commands` and optionally instances, completion, ports."""
    task_roles = {}
    for role, spec in roles.items():
        task_roles[role] = {
            "instances": spec.get("instances", 1),
            "dockerImage": "image",
            "resourcePerInstance": {
                "cpu": 1,
                "memoryMB": 128,
                "gpu": 0,
                **({"ports": spec["ports"]} if "ports" in spec else {}),
            },
            "commands": spec["commands"],
            **({"completion": spec["completion"]} if "completion" in spec else {}),
        }
    doc = {
        "protocolVersion": 2,
        "name": name,
        "type": "job",
        "prerequisites": [{"name": "image", "type": "dockerimage", "uri": "python:3.11-slim"}],
        "taskRoles": task_roles,
        **top,
    }
    return json.dumps(doc)  # JSON is YAML
