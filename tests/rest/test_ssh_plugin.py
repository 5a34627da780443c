"""The ssh plugin where tasks have no ssh server (the local executor) is refused when the job is
submitted, at its YAML path, naming `pai job exec`; on Kubernetes it is accepted as before."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient

from libs.protocol import parse_job
from services.rest.core.plugins import unsupported_plugins
from tests.rest.jobs import job_yaml

Client = TestClient[Any, Any]
YAML = {"Content-Type": "text/yaml"}


def with_plugins(name: str, *plugins: str) -> str:
    entries = [{"plugin": plugin, "parameters": {"jobssh": True}} for plugin in plugins]
    return job_yaml(name) + yaml.safe_dump({"extras": {"com.microsoft.pai.runtimeplugin": entries}})


@pytest.mark.parametrize(
    ("executor", "plugins", "refused_at"),
    [
        ("local", ["ssh"], ["[0]"]),
        ("local", ["cmd", "ssh"], ["[1]"]),
        ("local", ["cmd"], []),
        ("kubernetes", ["ssh"], []),
    ],
    ids=["ssh-on-local", "ssh-after-another-plugin", "no-ssh", "ssh-on-kubernetes"],
)
def test_the_ssh_plugin_is_a_problem_where_the_executor_has_no_ssh_server(
    executor: str, plugins: list[str], refused_at: list[str]
) -> None:
    problems = unsupported_plugins(parse_job(with_plugins("j", *plugins)), executor, "alice")

    assert [p.path for p in problems] == [f"extras.com.microsoft.pai.runtimeplugin{at}" for at in refused_at]
    for problem in problems:
        assert "ssh server" in problem.message
        assert "pai job exec alice~j -it -- bash" in problem.hint


async def test_a_job_with_the_ssh_plugin_is_refused_on_the_local_executor_and_by_a_dry_run(
    api: Client, admin_headers: dict[str, str]
) -> None:
    for path in ("/api/v2/jobs", "/api/v2/jobs?dryRun=true"):
        answer = await api.post(path, data=with_plugins("with-ssh", "ssh"), headers={**admin_headers, **YAML})
        assert answer.status == 400, await answer.text()
        body = await answer.json()
        assert body["code"] == "InvalidProtocolError"
        [problem] = body["problems"]
        assert problem["path"] == "extras.com.microsoft.pai.runtimeplugin[0]"
        assert "pai job exec admin~with-ssh" in problem["hint"]
    assert (await api.get("/api/v2/jobs/admin~with-ssh", headers=admin_headers)).status == 404
