"""A team's storage, shared by the kernel's rules: a day of three users on one platform.

The admin creates a group with alice and bob, adds a local storage and grants it to the group,
all with `pai storage ...`. alice's job writes a file into /mnt/team; bob's job appends a line to
it; both succeed and the file holds both lines. carol, outside the group, cannot name the storage
in a job (refused at submission) and her job that reads the storage's directory on the node is
refused by the kernel. On the host engine (the sandbox) and in a container (Podman's, run by
runc), the same job file.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.platform import ADMIN_PASSWORD, Cli, running_platform
from tests.security.test_tenants import detail, job, log_of, submit, user_client
from tests.support.images import local_image

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(400),
    pytest.mark.skipif(
        os.geteuid() != 0, reason="tenants' uids and the storage's group need a root platform"
    ),
]

STORAGE = {"plugin": "teamwise_storage", "parameters": {"storages": [{"name": "team"}]}}
PLUGINS = {"com.microsoft.pai.runtimeplugin": [STORAGE]}


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder every tenant may pass through (the test's own tmp_path is root's alone)."""
    with tempfile.TemporaryDirectory(prefix="pai-team-") as base:
        os.chmod(base, 0o755)
        yield Path(base)


@pytest.fixture
def image() -> Iterator[str]:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (make setup installs it where it runs as root)")
    reference = f"localhost/pai-test-team:{secrets.token_hex(6)}"
    with local_image(reference, "team"):
        yield reference


async def _admin_cli(cli: Cli, *args: str, env: dict[str, str] | None = None) -> str:
    code, out, err = await cli.run(*args, env=env)
    assert code == 0, (args, out, err)
    return out


async def _a_team_day(open_dir: Path, engine: str, image: str | None, runner: str = "runc") -> None:
    shared = open_dir / "team-data"
    data_dir = open_dir / f"data-{engine}"
    env = {
        "PAI_TASK_ENGINE": engine,
        "PAI_IMAGE_PULL": "never",
        "PAI_STORAGES_FILE": str(open_dir / "storages.yaml"),
    }
    if image:
        env["PAI_CONTAINER_RUNNER"] = runner

    def in_image(text: str) -> str:
        return text.replace("python:3.11-slim", image) if image else text

    async with running_platform(data_dir, task_user="auto", env=env) as platform:
        cli = Cli(platform.info.api_url, open_dir / f"config-{engine}")
        await _admin_cli(cli, "login", "--user", "admin", env={"PAI_PASSWORD": ADMIN_PASSWORD})
        async with contextlib.AsyncExitStack() as stack:
            users = {
                name: await stack.enter_async_context(contextlib.aclosing(await user_client(platform, name)))
                for name in ("alice", "bob", "carol")
            }
            await _admin_cli(cli, "group", "create", "team", "--description", "the team")
            for name in ("alice", "bob"):
                await _admin_cli(cli, "group", "add-user", "team", name)
            await _admin_cli(cli, "storage", "add", "team", "--path", str(shared))
            granted = await _admin_cli(cli, "storage", "grant", "team", "--group", "team")
            assert "granted to group team" in granted, granted
            listed = json.loads(await _admin_cli(cli, "storage", "list", "--json"))
            assert listed == [
                {
                    "name": "team",
                    "type": "local",
                    "path": str(shared),
                    "mountPath": "/mnt/team",
                    "default": False,
                    "groups": ["team"],
                }
            ], listed

            write = in_image(job("write", ["echo 'from alice' > /mnt/team/notes.txt"], extras=PLUGINS))
            await submit(users["alice"], write)
            done = await detail(users["alice"], "alice", "write")
            assert done["jobStatus"]["state"] == "SUCCEEDED", (
                done,
                await log_of(users["alice"], "alice", "write"),
            )

            # One line, so a refused append fails the job.
            appends = "echo 'from bob' >> /mnt/team/notes.txt && cat /mnt/team/notes.txt"
            append = in_image(job("append", [appends], extras=PLUGINS))
            await submit(users["bob"], append)
            done = await detail(users["bob"], "bob", "append")
            bob_log = await log_of(users["bob"], "bob", "append")
            assert done["jobStatus"]["state"] == "SUCCEEDED", (done, bob_log)
            assert (shared / "notes.txt").read_text() == "from alice\nfrom bob\n"
            if image:
                assert ("through podman and runc" in bob_log) == (runner == "runc"), bob_log
            # The kernel's rules, as the node holds them: the storage's group, nobody else.
            gid = int(json.loads((data_dir / "storage-gids.json").read_text())["team"])
            top, notes = shared.stat(), (shared / "notes.txt").stat()
            assert (top.st_gid, stat.S_IMODE(top.st_mode)) == (gid, 0o2770), top
            assert (notes.st_gid, stat.S_IMODE(notes.st_mode)) == (gid, 0o660), notes

            refused = await users["carol"].post(
                "/api/v2/jobs",
                content=in_image(job("mount", ["cat /mnt/team/notes.txt"], extras=PLUGINS)),
                headers={"Content-Type": "text/yaml"},
            )
            assert refused.status_code == 400, refused.text
            assert "team" in refused.json()["message"], refused.text
            if engine == "host":
                # On the node itself the directory is there to see, and closed to her.
                peek = f"cat {shared}/notes.txt || ls {shared}; echo done"
                await submit(users["carol"], job("peek", [peek]))
                done = await detail(users["carol"], "carol", "peek")
                carol_log = await log_of(users["carol"], "carol", "peek")
                assert "Permission denied" in carol_log, carol_log
                assert "from alice" not in carol_log, carol_log

            revoked = await _admin_cli(cli, "storage", "revoke", "team", "--group", "team")
            assert "revoked from group team" in revoked, revoked
            again = await users["bob"].post(
                "/api/v2/jobs",
                content=in_image(job("again", ["true"], extras=PLUGINS)),
                headers={"Content-Type": "text/yaml"},
            )
            assert again.status_code == 400, again.text


async def test_a_team_storage_is_shared_by_the_group_and_closed_to_others_on_the_host(open_dir: Path) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (make setup installs it where it runs as root)")
    await _a_team_day(open_dir, "host", None)


@pytest.mark.parametrize("runner", ["runc", "engine"])
async def test_a_team_storage_is_shared_by_the_group_in_containers(
    open_dir: Path, image: str, runner: str
) -> None:
    await _a_team_day(open_dir, "podman", image, runner)
