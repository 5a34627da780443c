"""What root does for a script that bubblewrap runs in its image, before bubblewrap: the mount
points made in the task's root file system, the root file system and its bind mounts staged in a
mount namespace of the script's own, and the tenant's user namespace. A symbolic link the image
or the task left never leads any of it out of the root file system."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.container import in_userns, make_mount_point, stage_root, tenant_userns

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="mounts and user namespaces made as root")


@pytest.fixture
def root_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="pai-rootfs-") as base:
        os.chmod(base, 0o755)
        yield Path(base)


def test_mount_points_are_made_open_to_the_task_whatever_the_umask(root_dir: Path) -> None:
    before = os.umask(0o077)
    try:
        make_mount_point(root_dir, "/etc/hosts", directory=False)
        make_mount_point(root_dir, "/mnt/team", directory=True)
        make_mount_point(root_dir, "/mnt/team", directory=True)  # again: nothing to do
    finally:
        os.umask(before)
    assert (root_dir / "etc").stat().st_mode & 0o777 == 0o755
    assert (root_dir / "etc" / "hosts").stat().st_mode & 0o777 == 0o644
    assert (root_dir / "mnt" / "team").is_dir()


def test_a_mount_point_behind_a_symbolic_link_is_refused(root_dir: Path, tmp_path: Path) -> None:
    (root_dir / "mnt").symlink_to(tmp_path)  # the task's link to a folder of the host
    with pytest.raises(OSError) as refused:
        make_mount_point(root_dir, "/mnt/team", directory=True)
    assert refused.value.errno in (errno.ENOTDIR, errno.ELOOP)
    assert not (tmp_path / "team").exists()
    with pytest.raises(OSError):
        make_mount_point(root_dir, "/../escape", directory=True)


def _in_child(action: object) -> tuple[int, str]:
    """``action()`` in a forked child (its mounts die with it): exit code and what it wrote."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            os.close(read)
            os.write(write, str(action()).encode())  # type: ignore[operator]
        except OSError as exc:
            os.write(write, f"OSError {exc.errno} {exc}".encode())
            code = 3
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as said:
        text = said.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), text


@ROOT_ONLY
def test_the_root_and_its_binds_are_staged_in_the_scripts_own_mount_namespace(
    root_dir: Path, tmp_path: Path
) -> None:
    rootfs, stage, work = root_dir / "rootfs", root_dir / "stage", root_dir / "work"
    for folder in (rootfs, stage, work):
        folder.mkdir()
    (work / "data.txt").write_text("from the work dir")
    (tmp_path / "hosts").write_text("127.0.0.1 localhost\n")
    make_mount_point(rootfs, str(work), directory=True)
    make_mount_point(rootfs, "/etc/hosts", directory=False)

    def staged() -> str:
        stage_root(
            str(rootfs),
            str(stage),
            [(str(work), str(work), False), (str(tmp_path / "hosts"), "/etc/hosts", True)],
        )
        seen = (stage / str(work).lstrip("/") / "data.txt").read_text()
        try:
            (stage / "etc" / "hosts").write_text("changed")
            return "hosts writable"
        except OSError as exc:
            return f"{seen}; hosts: {exc.errno}"

    # The folder a shared mount, as / is under systemd: what the child mounts there would come
    # back here but for its namespace being a slave of this one.
    subprocess.run(["mount", "--bind", str(root_dir), str(root_dir)], check=True)
    try:
        subprocess.run(["mount", "--make-shared", str(root_dir)], check=True)
        code, said = _in_child(staged)
        # Nothing of it in this namespace: the stage is the empty folder it was.
        left = list(stage.iterdir())
    finally:
        subprocess.run(["umount", "--recursive", "--lazy", str(root_dir)], check=False)
    assert code == 0, said
    assert said == f"from the work dir; hosts: {errno.EROFS}"
    assert left == []
    assert (tmp_path / "hosts").read_text() == "127.0.0.1 localhost\n"


@ROOT_ONLY
def test_a_bind_whose_mount_point_became_a_symbolic_link_is_refused(root_dir: Path, tmp_path: Path) -> None:
    rootfs, stage = root_dir / "rootfs", root_dir / "stage"
    rootfs.mkdir()
    stage.mkdir()
    target = tmp_path / "host-folder"
    target.mkdir()
    (rootfs / "mnt").symlink_to(tmp_path)  # made by the task between two scripts
    source = root_dir / "storage"
    source.mkdir()

    code, said = _in_child(
        lambda: stage_root(str(rootfs), str(stage), [(str(source), "/mnt/host-folder", False)])
    )
    assert code == 3
    assert f"OSError {errno.ELOOP}" in said
    assert list(target.iterdir()) == []


@ROOT_ONLY
def test_the_tenants_user_namespace_maps_its_ids_and_storage_groups_and_nothing_else() -> None:
    nsenter, setpriv = shutil.which("nsenter"), shutil.which("setpriv")
    if nsenter is None or setpriv is None:
        pytest.skip("util-linux's nsenter and setpriv are needed")
    uid, gid, storage = 1_900_000_001, 1_900_000_001, 1_900_000_777
    fd = tenant_userns(uid, gid, [storage, gid])
    try:
        # The tenant may enter it (it is the tenant's), and sees its ids and its storage's group.
        drop = [
            setpriv,
            f"--reuid={uid}",
            f"--regid={gid}",
            f"--groups={gid},{storage}",
            "--no-new-privs",
            "--",
        ]
        enter = [nsenter, f"--user=/proc/self/fd/{fd}", "--preserve-credentials", "--"]
        done = subprocess.run(
            [*drop, *enter, "sh", "-c", "cat /proc/self/uid_map /proc/self/gid_map; id -G"],
            pass_fds=(fd,),
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        os.close(fd)
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines()]
    assert lines[0] == [str(uid), str(uid), "1"]  # uid: the tenant's only (no root in it)
    assert sorted(lines[1:3]) == sorted([[str(gid), str(gid), "1"], [str(storage), str(storage), "1"]])
    assert lines[3] == [str(gid), str(storage)]  # not the overflow gid: the storage is named


def test_bubblewrap_takes_the_user_namespace_in_place_of_making_one() -> None:
    argv = [
        "/usr/bin/setpriv",
        "--reuid=5",
        "--",
        "/usr/bin/bwrap",
        "--unshare-user",
        "--uid",
        "5",
        "--unshare-pid",
    ]
    assert in_userns(argv, 9) == [
        "/usr/bin/setpriv",
        "--reuid=5",
        "--",
        "/usr/bin/bwrap",
        "--userns",
        "9",
        "--uid",
        "5",
        "--unshare-pid",
    ]
