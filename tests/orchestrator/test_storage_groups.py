"""Team storages' groups: which storages a task gets a gid for, the directory made the group's
with its default ACL, and the gid carried to setpriv, Podman and runc."""

from __future__ import annotations

import json
import os
import stat
import struct
from pathlib import Path
from typing import Any

import pytest

from libs.protocol.storage_paths import path_refusal
from services.orchestrator.adapters import storage_dirs
from services.orchestrator.adapters.isolation import TenantUids, storage_gids
from services.orchestrator.adapters.storage_dirs import prepare_storage_dir, storage_groups
from services.orchestrator.core.bundles import bundle_config
from services.orchestrator.core.containers import ContainerPlan, run_arguments
from services.orchestrator.core.sandboxes import SandboxTools, drop_arguments
from services.orchestrator.core.storage_groups import (
    DEFAULT_ACL_XATTR,
    STORAGE_MODE,
    default_acl,
    needs_change,
    shared_storages,
)

TOOLS = SandboxTools("/usr/bin/bwrap", "/usr/bin/setpriv")
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory another group needs root")


def test_the_default_acl_is_the_kernels_form_of_user_and_group_rwx_and_nothing_for_others() -> None:
    acl = default_acl()
    version, *rest = struct.unpack("<I" + "HHI" * 3, acl)
    entries = [tuple(rest[i : i + 3]) for i in range(0, len(rest), 3)]
    assert version == 2
    # Sorted by tag (the kernel refuses another order): user::rwx, group::rwx, other::---.
    assert entries == [(0x01, 7, 0xFFFFFFFF), (0x04, 7, 0xFFFFFFFF), (0x20, 0, 0xFFFFFFFF)]


@pytest.mark.parametrize(
    ("storages", "shared"),
    [
        pytest.param(
            [{"name": "team", "type": "local", "path": "/srv/team"}], [("team", "/srv/team")], id="local"
        ),
        pytest.param([{"name": "home", "type": "nfs", "path": "/home"}], [], id="nfs-is-its-servers"),
        pytest.param([{"name": "blob", "type": "azureBlob", "path": ""}], [], id="remote"),
        pytest.param(
            [
                {"name": "b", "type": "local", "path": "/srv/b"},
                {"name": "a", "type": "local", "path": "/srv/a"},
                {"name": "a", "type": "local", "path": "/srv/a"},
            ],
            [("a", "/srv/a"), ("b", "/srv/b")],
            id="each-once-sorted",
        ),
    ],
)
def test_only_local_storages_are_shared_through_a_group(
    storages: list[dict[str, Any]], shared: list[tuple[str, str]]
) -> None:
    assert shared_storages(storages) == shared


def test_a_directory_needs_a_change_until_it_has_the_group_and_mode_2770() -> None:
    assert needs_change(stat.S_IFDIR | 0o755, 0, 7)
    assert needs_change(stat.S_IFDIR | 0o2770, 0, 7)
    assert needs_change(stat.S_IFDIR | 0o770, 7, 7)
    assert not needs_change(stat.S_IFDIR | STORAGE_MODE, 7, 7)


@pytest.mark.parametrize(
    ("path", "refused"),
    [
        ("/srv/team", ""),
        ("/data/team", ""),
        ("/home/team-data", ""),
        ("srv/team", "absolute"),
        ("/srv/../etc", "'..'"),
        ("/", "holds other files"),
        ("/srv", "holds other files"),
        ("/home", "holds other files"),
        ("/etc", "system tree /etc"),
        ("/etc/ssh", "system tree /etc"),
        ("/usr/local/share", "system tree /usr"),
        ("/var/lib/pai/uids", "system tree /var/lib/pai"),
    ],
)
def test_a_system_directory_is_never_a_storage(path: str, refused: str) -> None:
    why = path_refusal(path)
    assert (refused in why) if refused else why == "", why


def test_the_drop_keeps_the_storages_groups_and_no_other() -> None:
    args = drop_arguments(TOOLS, 1800000007, 1800000007, (1800000010, 1800000011))
    assert "--groups=1800000010,1800000011" in args
    assert "--clear-groups" not in args
    assert "--clear-groups" in drop_arguments(TOOLS, 1800000007, 1800000007)


def _plan(groups: tuple[int, ...]) -> ContainerPlan:
    return ContainerPlan(
        engine="podman",
        image="sha256:abc",
        name="pai-x",
        user="1800000007:1800000007",
        work_dir="/data/work",
        labels=(),
        memory_mb=128,
        cpus=1.0,
        pids=100,
        groups=groups,
    )


def test_a_container_gets_the_storages_groups_through_the_engine_and_runc() -> None:
    args = run_arguments(_plan((1800000010,)))
    assert args[args.index("--group-add") + 1] == "1800000010"
    assert "--group-add" not in run_arguments(_plan(()))
    template = {"process": {"args": ["/init", "/bin/sh"], "user": {"uid": 0, "gid": 0}}, "linux": {}}
    config = bundle_config(template, _plan((1800000010,)), rootfs="/r", template_work_dir="/w", files={})
    assert config["process"]["user"]["additionalGids"] == [1800000007, 1800000010]
    config = bundle_config(template, _plan(()), rootfs="/r", template_work_dir="/w", files={})
    assert config["process"]["user"]["additionalGids"] == [1800000007]


@ROOT_ONLY
def test_a_storage_directory_becomes_its_groups_and_new_files_are_group_writable(tmp_path: Path) -> None:
    shared = tmp_path / "team"
    shared.mkdir(mode=0o755)
    prepare_storage_dir(shared, 1800000099)
    top = shared.stat()
    assert (top.st_gid, stat.S_IMODE(top.st_mode)) == (1800000099, 0o2770)
    assert os.getxattr(shared, DEFAULT_ACL_XATTR) == default_acl()
    old = os.umask(0o022)
    try:
        (shared / "notes.txt").write_text("x\n")
        (shared / "sub").mkdir()
    finally:
        os.umask(old)
    notes, sub = (shared / "notes.txt").stat(), (shared / "sub").stat()
    # Group-writable and closed to others whatever the umask; the setgid bit gave the group.
    assert (notes.st_gid, stat.S_IMODE(notes.st_mode)) == (1800000099, 0o660)
    assert (sub.st_gid, stat.S_IMODE(sub.st_mode)) == (1800000099, 0o2770)


@ROOT_ONLY
def test_a_missing_storage_directory_is_made_and_a_link_is_not_followed(tmp_path: Path) -> None:
    prepare_storage_dir(tmp_path / "new", 1800000098)
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o2770
    (tmp_path / "elsewhere").mkdir(mode=0o755)
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        prepare_storage_dir(tmp_path / "link", 1800000098)
    assert stat.S_IMODE((tmp_path / "elsewhere").stat().st_mode) == 0o755


@ROOT_ONLY
def test_a_storages_gid_is_claimed_once_kept_and_never_a_tenants(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = tmp_path / "registry"
    tenants = TenantUids(tmp_path, registry, (1800500000, 1800500009))
    alice = tenants.user("alice")
    gids = storage_gids(tenants)
    shared = tmp_path / "team"
    storages = [{"name": "team", "type": "local", "path": str(shared)}]
    (gid,) = storage_groups(gids, storages)
    assert gid != alice.uid
    assert storage_groups(storage_gids(tenants), storages) == (gid,)
    assert json.loads((tmp_path / "storage-gids.json").read_text()) == {"team": gid}
    assert json.loads((registry / str(gid)).read_text())["user"] == "storage:team"
    assert shared.stat().st_gid == gid

    # A directory the guard refuses (libs/protocol/storage_paths.py, its cases above) is left as it
    # is and gives no group. A folder of the test's stands for the system's: never /etc itself.
    kept = tmp_path / "system"
    kept.mkdir(mode=0o755)
    monkeypatch.setattr(storage_dirs, "path_refusal", lambda path: "refused" if path == str(kept) else "")
    assert storage_groups(gids, [{"name": "system", "type": "local", "path": str(kept)}]) == ()
    assert (kept.stat().st_gid, stat.S_IMODE(kept.stat().st_mode)) == (0, 0o755)
