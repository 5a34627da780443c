"""A task run by a root platform tries to read the data dir and other jobs' secrets: refused."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.orchestrator.adapters.executing import TaskExit
from services.orchestrator.adapters.isolation import TaskUser, TaskUserError, resolve_task_user
from services.orchestrator.adapters.local import LocalExecutor
from services.orchestrator.core.deciders import decide
from services.orchestrator.core.effects import Context
from services.orchestrator.core.frameworks import Framework, TaskKey
from tests.orchestrator.jobs import job_config
from tests.orchestrator.sim import T0, scheduled, submitted

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")

KEY = TaskKey(0, "worker", 0, 0)


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Under /tmp itself: a path the task's user may walk to, as a real data dir is.
    with tempfile.TemporaryDirectory(prefix="pai-security-") as base:
        os.chmod(base, 0o755)
        yield Path(base) / "data"


def framework(job_id: str, command: str) -> Framework:
    config = job_config({"worker": (1, command)})
    fw: Framework | None = decide(None, submitted(config, job_id=job_id), Context(now=T0)).framework
    fw = decide(fw, scheduled(config, job_id=job_id), Context(now=T0)).framework
    assert fw is not None
    return fw


async def run(
    executor: LocalExecutor, exits: asyncio.Queue[TaskExit], job_id: str, command: str
) -> tuple[TaskExit, Path]:
    _, directory = await executor.start(framework(job_id, command), KEY)
    return await asyncio.wait_for(exits.get(), 60), directory


async def test_a_task_of_a_root_platform_runs_as_the_task_user_and_reads_nothing_of_the_platform(
    data_dir: Path,
) -> None:
    user = resolve_task_user("auto")
    assert isinstance(user, TaskUser)
    assert user.uid != 0
    jwt = data_dir / "rest-jwt.secret"
    await asyncio.to_thread(data_dir.mkdir)
    await asyncio.to_thread(jwt.write_text, "signing-secret")
    await asyncio.to_thread(jwt.chmod, 0o644)  # as an older version may have left it

    async def secrets(job_id: str) -> dict[str, Any]:
        return {"token": f"secret-of-{job_id}"}

    exits: asyncio.Queue[TaskExit] = asyncio.Queue()
    executor = LocalExecutor(data_dir, exits.put, secrets, poll_seconds=0.05, task_user=user)
    try:
        # The victim: a job whose task still holds its secrets file while the attacker runs.
        victim_started = await executor.start(framework("victim", "sleep 30"), KEY)
        victim_dir = victim_started[1]
        attack = "; ".join(
            [
                "id -u",
                "pwd",
                "echo home=$HOME",
                f"cat {data_dir}/rest-jwt.secret && echo READ-JWT",
                f"ls {data_dir} && echo LISTED-DATA-DIR",
                f"ls {data_dir}/jobs && echo LISTED-JOBS",
                f"cat {victim_dir}/secrets.json && echo READ-VICTIM-SECRETS",
                "cat ../secrets.json && echo READ-OWN-SECRETS-FILE",
                "cat ../spec.json > /dev/null && echo READ-OWN-SPEC",
                "echo mine > own-file && cat own-file",
                "exit 0",
            ]
        )
        done, directory = await run(executor, exits, "attacker", attack)
        await executor.stop("victim", KEY)
        assert (await asyncio.wait_for(exits.get(), 60)).job_id == "victim"
    finally:
        await executor.close()
    assert done.exit_code == 0
    out = (directory / "logs" / "user.pai.stdout").read_text()
    lines = out.split()
    assert lines[0] == str(user.uid)
    assert lines[1] == str(directory / "work")
    assert f"home={directory / 'work'}" in lines
    for leak in (
        "READ-JWT",
        "LISTED-DATA-DIR",
        "LISTED-JOBS",
        "READ-VICTIM-SECRETS",
        "READ-OWN-SECRETS-FILE",
    ):
        assert leak not in out
    assert "signing-secret" not in out
    assert "secret-of-" not in out
    assert "READ-OWN-SPEC" in out
    assert "mine" in lines
    assert (directory / "work" / "own-file").stat().st_uid == user.uid
    assert (data_dir / "rest-jwt.secret").stat().st_mode & 0o077 == 0


async def test_a_task_user_renders_its_secrets_without_a_file_it_could_read(data_dir: Path) -> None:
    user = resolve_task_user("auto")
    assert user is not None

    async def secrets(_job_id: str) -> dict[str, Any]:
        return {"token": "tok-42"}

    exits: asyncio.Queue[TaskExit] = asyncio.Queue()
    executor = LocalExecutor(data_dir, exits.put, secrets, poll_seconds=0.05, task_user=user)
    try:
        done, directory = await run(
            executor,
            exits,
            "job1",
            # the rendered script reached bash, yet no descriptor of it is left to the commands
            "test '<% $secrets.token %>' = tok-42 && ! ls -l /proc/self/fd | grep -q '[.]sh'",
        )
    finally:
        await executor.close()
    assert done.exit_code == 0, (directory / "logs" / "user.pai.all").read_text()


@pytest.mark.parametrize(
    ("setting", "expected"),
    [("none", None), ("root", None), ("nobody", "nobody")],
    ids=["none keeps the platform's user", "the platform's own user is no drop", "a named user"],
)
def test_the_admin_chooses_the_task_user(setting: str, expected: str | None) -> None:
    user = resolve_task_user(setting)
    assert (user.name if user else None) == expected


def test_a_task_user_that_does_not_exist_is_named_with_the_fix() -> None:
    with pytest.raises(TaskUserError, match="PAI_TASK_USER=no-such-user: no such user"):
        resolve_task_user("no-such-user")
