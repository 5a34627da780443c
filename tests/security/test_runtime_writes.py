"""The runtime (root) never writes through a symlink a task put in its work dir.

Each file the runtime writes in a task's work dir (the ssh plugin's keys, config and
authorized_keys, the storage plugin's links and the folders above them) and each script it runs
(the cmd plugin's pre and post commands, the user command) is tried with a symlink in its place,
or in the place of a folder above it, pointing into a folder only root may enter. The folder
stays as it was; the task's own files belong to the task's user.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.helpers import all_log, result_of, role, run_runtime, spec_for, write_spec

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a root runtime dropping to a task user")

TENANT = 1_800_999_990  # a uid no one has: a tenant's, as the executor hands them out


@pytest.fixture
def root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="pai-writes-") as base:
        os.chmod(base, 0o755)
        yield Path(base)


@pytest.fixture
def root_only(root: Path) -> Path:
    folder = root / "root-only"
    folder.mkdir(mode=0o700)
    # Files by the names the runtime gives its own (a script is written, run, then removed).
    for name in KEPT:
        (folder / name).write_text("root's\n")
    return folder


KEPT = ("keep", "cmd-pre.sh", "cmd-post.sh", "user-command.sh", "authorized_keys", "config")


def prepared(root: Path, entrypoint: str, plant: dict[str, str | None], **extra: Any) -> dict[str, Any]:
    """A task spec whose work dir is the tenant's and holds ``plant``: name -> symlink target
    (None: a folder of the tenant's)."""
    spec = spec_for(
        root,
        "worker",
        0,
        [role("worker")],
        entrypoint,
        run_as={"name": "tenant", "uid": TENANT, "gid": TENANT},
        storages=[{"name": "data", "type": "local", "path": str(root), "mount_path": "/mnt/data"}],
        **extra,
    )
    work = Path(spec["dirs"]["work_dir"])
    work.mkdir(parents=True)
    os.chown(work, TENANT, TENANT)
    work.chmod(0o700)
    for name, target in plant.items():
        path = work / name
        if target is None:
            path.mkdir()
        else:
            path.symlink_to(target)
        os.chown(path, TENANT, TENANT, follow_symlinks=False)
    return spec


def untouched(root_only: Path) -> bool:
    return sorted(p.name for p in root_only.iterdir()) == sorted(KEPT) and all(
        (root_only / name).read_text() == "root's\n" for name in KEPT
    )


SSH = {
    "plugin": "ssh",
    "parameters": {"jobssh": True, "userssh": {"type": "custom", "value": "ssh-ed25519 AAAA x"}},
}
STORAGE = {"plugin": "storage", "parameters": {"storageConfigNames": ["data"]}}
CMD = {"plugin": "cmd", "parameters": {"preCommands": ["echo pre"], "postCommands": ["echo post"]}}


@pytest.mark.parametrize(
    ("plant", "plugins"),
    [
        ({".ssh": "ROOT"}, [SSH]),
        ({".ssh": None, ".ssh/authorized_keys": "ROOT/authorized_keys"}, [SSH]),
        ({".ssh": None, ".ssh/id_ed25519": "ROOT/id"}, [SSH]),
        ({".ssh": None, ".ssh/config": "ROOT/config"}, [SSH]),
        ({"mnt": "ROOT"}, [STORAGE]),
        ({"mnt": None, "mnt/data": "ROOT/data"}, [STORAGE]),
        ({".runtime": "ROOT", "private": "ROOT"}, [CMD]),
    ],
    ids=[
        "the ssh folder is a link",
        "authorized_keys is a link",
        "the job key is a link",
        "the ssh config is a link",
        "a folder above a storage link is a link",
        "the storage link's place is a link",
        "the scripts' old folder is a link",
    ],
)
def test_a_symlink_in_the_work_dir_leads_the_runtime_nowhere(
    root: Path, root_only: Path, plant: dict[str, str | None], plugins: list[dict[str, Any]]
) -> None:
    spec = prepared(
        root,
        "echo user command ran as $(id -u)",
        {
            name: None if target is None else target.replace("ROOT", str(root_only))
            for name, target in plant.items()
        },
        plugins=plugins,
    )
    code, err = run_runtime(write_spec(root, spec))
    assert untouched(root_only), sorted(p.name for p in root_only.iterdir())
    result = result_of(spec)
    # The plugin either did its work as the tenant elsewhere, or failed: never wrote as root.
    assert code in (0, 247), (code, err, all_log(spec))
    if code == 0:
        assert f"user command ran as {TENANT}" in all_log(spec)
    else:
        assert result["runtimeExit"]["phrase"] == "RuntimePluginFailed"


def test_what_plugins_write_in_the_work_dir_is_the_tenants(root: Path, root_only: Path) -> None:
    spec = prepared(root, "ls -la .ssh mnt", {}, plugins=[SSH, STORAGE, CMD])
    code, err = run_runtime(write_spec(root, spec))
    assert code == 0, (err, all_log(spec))
    work = Path(spec["dirs"]["work_dir"])
    for path in (work / ".ssh", work / ".ssh" / "authorized_keys", work / ".ssh" / "config", work / "mnt"):
        assert path.lstat().st_uid == TENANT, path
    assert (work / "mnt" / "data").is_symlink()
    assert not (work / ".runtime").exists()  # the scripts are the runtime's, out of the work dir
    assert "pre" in all_log(spec)
    assert "post" in all_log(spec)
    assert untouched(root_only)
