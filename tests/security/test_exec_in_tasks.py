"""`pai job exec` on a root platform whose tasks run as their tenants: the command runs as the
task's own commands run, on the host (in the task's sandbox: its uid, its PID namespace, its
cgroups, its work dir) and in the task's image (the same uid, inside the container).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.platform import Cli, Platform, running_platform
from tests.e2e.test_exec import in_a_terminal
from tests.security.test_tenants import detail, job, submit, user_client
from tests.support.images import local_image
from tests.support.waiting import eventually, polled

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(os.geteuid() != 0, reason="tenants' uids and the sandbox need a root platform"),
]

# What the task's own command sees of itself, written down before it waits for the test's word.
SEEN = (
    "id -u > seen-uid; readlink /proc/self/ns/pid > seen-pidns; cat /proc/self/cgroup > seen-cgroup; "
    "pwd > seen-dir; touch ready"
)
HOLDER = [SEEN, "while [ ! -f done ]; do sleep 0.1; done"]
# The same of the exec's command, on its output.
LOOK = (
    'echo "uid $(id -u)"; echo "pidns $(readlink /proc/self/ns/pid)"; echo "dir $(pwd)"; '
    "cat /proc/self/cgroup"
)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder every tenant may pass through (the test's own tmp_path is root's alone)."""
    with tempfile.TemporaryDirectory(prefix="pai-exec-") as base:
        os.chmod(base, 0o755)
        yield Path(base)


async def _bobs_cli(platform: Platform, config: Path) -> Cli:
    cli = Cli(platform.info.api_url, config)
    code, _, err = await cli.run("login", "--user", "bob", env={"PAI_PASSWORD": "bob-password-1"})
    assert code == 0, err
    return cli


async def _holding(platform: Platform, data_dir: Path, yaml_text: str) -> Path:
    async with contextlib.aclosing(await user_client(platform, "bob")) as bob:
        job_id = await submit(bob, yaml_text)
    work = data_dir / "jobs" / job_id / "attempt-0" / "worker-0" / "try-0" / "work"
    await eventually(polled((work / "ready").exists), bool, within=90)
    return work


async def _released(platform: Platform, work: Path) -> None:
    """Let the holder end and wait until its job is over: the platform then has removed what the
    task had (its overlay, its groups) before the platform stops and its folder is removed."""
    (work / "done").touch()
    await detail(platform.api, "bob", "holder")


async def test_exec_in_a_sandboxed_host_task_runs_as_its_tenant_in_its_namespace_and_groups(
    open_dir: Path,
) -> None:
    if shutil.which("bwrap") is None or shutil.which("nsenter") is None:
        pytest.skip("bubblewrap and nsenter are needed for the host sandbox")
    data_dir = open_dir / "data"
    async with running_platform(data_dir, task_user="auto", env={"PAI_TASK_ENGINE": "host"}) as platform:
        work = await _holding(platform, data_dir, job("holder", HOLDER))
        try:
            cli = await _bobs_cli(platform, open_dir / "bob")
            code, out, err = await cli.run("job", "exec", "holder", "--", "id", "-u")
            assert code == 0, err
            seen_uid = (work / "seen-uid").read_text().strip()
            assert out.strip() == seen_uid
            assert seen_uid not in ("0", str(os.geteuid()))

            code, out, err = await cli.run("job", "exec", "holder", "--", "sh", "-c", LOOK)
            assert code == 0, err
            lines = out.splitlines()
            assert lines[:3] == [
                f"uid {seen_uid}",
                f"pidns {(work / 'seen-pidns').read_text().strip()}",
                f"dir {(work / 'seen-dir').read_text().strip()}",
            ]
            # The task's own groups (memory, CPU, processes), so the exec counts against its limits.
            assert sorted(lines[3:]) == sorted((work / "seen-cgroup").read_text().splitlines())
            shown = await asyncio.to_thread(
                in_a_terminal,
                cli,
                ["job", "exec", "holder", "-it", "--", "sh"],
                [(b"", b"echo name=$PAI_JOB_NAME.; tty\r"), (b"name=bob~holder.", b"exit\r")],
            )
            assert b"name=bob~holder." in shown
            assert b"not a tty" not in shown
        finally:
            await _released(platform, work)


@pytest.fixture
def marker_image() -> Iterator[tuple[str, str]]:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    reference = f"localhost/pai-test-exec:{secrets.token_hex(6)}"
    marker = f"exec-{secrets.token_hex(4)}"
    with local_image(reference, marker):
        yield reference, marker


@pytest.mark.parametrize("runner", ["bwrap", "runc", "engine"], ids=["bubblewrap", "runc", "podman-exec"])
async def test_exec_in_a_task_in_its_image_runs_in_its_container_as_its_tenant(
    open_dir: Path, marker_image: tuple[str, str], runner: str
) -> None:
    reference, marker = marker_image
    data_dir = open_dir / "data"
    env = {"PAI_TASK_ENGINE": "podman", "PAI_IMAGE_PULL": "never", "PAI_CONTAINER_RUNNER": runner}
    async with running_platform(data_dir, task_user="auto", env=env) as platform:
        yaml_text = job("holder", HOLDER).replace("python:3.11-slim", reference)
        work = await _holding(platform, data_dir, yaml_text)
        try:
            cli = await _bobs_cli(platform, open_dir / "bob")
            code, out, err = await cli.run(
                "job", "exec", "holder", "--", "sh", "-c", 'echo "$(id -u) $(cat /pai-marker) $PAI_JOB_NAME"'
            )
            assert code == 0, err
            assert out.split() == [(work / "seen-uid").read_text().strip(), marker, "bob~holder"]
            # Under the container's seccomp filter, as the task's own commands are (mode 2: a
            # filter; bubblewrap's exec loads the engine's profile before nsenter).
            code, out, err = await cli.run(
                "job", "exec", "holder", "--", "grep", "^Seccomp:", "/proc/self/status"
            )
            assert code == 0, err
            assert out.split() == ["Seccomp:", "2"], out
            shown = await asyncio.to_thread(
                in_a_terminal,
                cli,
                ["job", "exec", "holder", "-it", "--", "sh"],
                [(b"", b"echo name=$PAI_JOB_NAME.; tty\r"), (b"name=bob~holder.", b"exit\r")],
            )
            assert b"name=bob~holder." in shown
            assert b"not a tty" not in shown
        finally:
            await _released(platform, work)
