"""The command of a task's container: its script read from stdin, a stop passed to all it started.

The runtime runs each of a task's command scripts (the user's command, a plugin's pre and post
commands) as ``<engine> run <arguments> <image> <this command>`` with the script on the
container's stdin (services/orchestrator/core/containers.py decides the arguments). The script,
secrets rendered in, is thus never an argument of any process, where another could read it.
Where the executor runs containers with runc itself (services/orchestrator/core/bundles.py), the
runtime writes each script's container's configuration from the task's and runs
``runc run --bundle``: the same command, the script on its stdin too.
"""

from __future__ import annotations

import contextlib
import errno
import os

TYPE_CHECKING = False  # not `typing`'s: importing it costs every task's start-up
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

LOADER = (
    # Reads the script whole from stdin (the runtime's private file: never in an argument, where
    # every process could read it), closes stdin, and runs the script in the background so that
    # a stop signal can be passed to everything the script started (its process group).
    "IFS= read -r -d '' _pai_script; exec 0</dev/null; "
    "trap 'trap \"\" TERM INT; kill -TERM 0 2>/dev/null' TERM INT; "
    '( eval "unset -v _pai_script; $_pai_script" ) & _pai_pid=$!; '
    "wait $_pai_pid; _pai_code=$?; "
    'while kill -0 "$_pai_pid" 2>/dev/null; do wait "$_pai_pid"; _pai_code=$?; done; '
    'exit "$_pai_code"'
)
"""The container's command: bash when the image has it, else its /bin/sh."""


def shell_command(label: str) -> list[str]:
    """The command a container runs: the loader, under bash where the image has bash."""
    chooser = 'if command -v bash >/dev/null 2>&1; then exec bash -c "$1" "$0"; fi; eval "$1"'
    return ["/bin/sh", "-c", chooser, label, LOADER]


RUN_NAME_KEPT = 190
"""Of a task's container name in each of its scripts' (runc's ids and cgroups are file names)."""


def run_prefix(name: str) -> str:
    """What the name of every container of a task's scripts begins with (the runc runner)."""
    return f"{name[:RUN_NAME_KEPT]}-"


def run_name(name: str, label: str) -> str:
    """The container of one of a task's command scripts: a name of its own per script, so that
    each ends with its own container and all of a task's can be found by their prefix."""
    safe = "".join(c if c.isalnum() or c in "_.-" else "_" for c in label)[:60]
    return run_prefix(name) + safe


def script_config(
    base: dict[str, Any], name: str, label: str, env: dict[str, str], mounts: list[tuple[str, str, bool]]
) -> dict[str, Any]:
    """The OCI configuration of one script's container under runc: the task's (written by the
    executor, services/orchestrator/core/bundles.py) with the loader as its command, the task's
    variables by value, the storages' mounts and a cgroup named after the script's container."""
    process = base["process"]
    linux = base["linux"]
    kept = [entry for entry in process.get("env") or [] if entry.partition("=")[0] not in env]
    binds = [
        {
            "destination": target,
            "type": "bind",
            "source": source,
            "options": ["rbind", "rprivate", "ro" if read_only else "rw"],
        }
        for source, target, read_only in mounts
    ]
    parent = str(linux.get("cgroupsPath") or "").rpartition("/")[0]
    return {
        **base,
        "process": {
            **process,
            "args": [*process["args"], *shell_command(label)],
            "env": kept + [f"{key}={value}" for key, value in env.items()],
        },
        "mounts": [*base["mounts"], *binds],
        "linux": {**linux, "cgroupsPath": f"{parent}/{run_name(name, label)}"},
    }


def _repository(reference: str) -> str:
    """``registry/repo`` of an image reference, without its tag or digest."""
    name = reference.split("@", 1)[0]
    slash, colon = name.rfind("/"), name.rfind(":")
    return name[:colon] if colon > slash else name


def digest_of(digests: list[str], reference: str) -> str | None:
    """The digest of the repository ``reference`` names among an image's ``RepoDigests`` (an
    image tagged under several names has one per repository): the whole last path part must
    match, not a name ending alike; the first where none is that repository (an image named by
    its id). The orchestrator's look at an image reads it the same way."""
    repository = _repository(reference)
    for digest in digests:
        named = digest.split("@", 1)[0]
        if named == repository or named.endswith("/" + repository):
            return digest
    return digests[0] if digests else None


def make_mount_point(root: Path, target: str, *, directory: bool) -> None:
    """``target`` (an absolute path in the root file system ``root``) made where it is missing, a
    folder or an empty file, owned by root: what bubblewrap mounts over there. Each folder on the
    way is opened without following a symbolic link (a link the image or the task left points
    anywhere on the host: OSError), so nothing is made outside ``root``."""
    parts = [p for p in target.split("/") if p and p != "."]
    if not parts or ".." in parts:
        raise OSError(errno.EINVAL, f"{target}: not a path a mount can be made at")
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(root, flags)
    try:
        for n, part in enumerate(parts):
            if n == len(parts) - 1 and not directory:
                with contextlib.suppress(FileExistsError):
                    made = os.open(
                        part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
                    )
                    os.fchmod(made, 0o644)  # whatever the umask of the process making it
                    os.close(made)
                return
            new = True
            try:
                os.mkdir(part, 0o700, dir_fd=fd)
            except FileExistsError:
                new = False
            inner = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = inner
            if new:
                os.fchmod(fd, 0o755)
    finally:
        os.close(fd)


_CLONE_NEWNS = 0x00020000
_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_SLAVE = 0x1, 0x20, 0x1000, 0x4000, 0x80000
_O_BENEATH = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


def _beneath(root: int, target: str) -> int:
    """An ``O_PATH`` descriptor of ``target`` under the folder ``root``, no symbolic link
    followed on the way (the image's or the task's, which could point anywhere on the host)."""
    fd = os.dup(root)
    try:
        for part in (p for p in target.split("/") if p and p != "."):
            if part == "..":
                raise OSError(errno.EINVAL, f"{target}: not a path a mount can be made at")
            inner = os.open(part, _O_BENEATH, dir_fd=fd)
            os.close(fd)
            fd = inner
            if (os.fstat(fd).st_mode & 0o170000) == 0o120000:  # a symbolic link, not followed
                raise OSError(errno.ELOOP, f"{target}: {part} is a symbolic link")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _mount(source: str | None, target: str, flags: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)  # the process's own: a handle, not a load
    if libc.mount(source and os.fsencode(source), os.fsencode(target), None, flags, None) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"mount {source or ''} {target}: {os.strerror(code)}")


def enter_stage(rootfs: str, stage: str) -> None:
    """This thread (the runtime's main one, whose children run the scripts) in a mount namespace
    of its own, a slave of the host's (nothing made in it reaches the host's), with the task's
    root file system at ``stage``: a path every tenant may reach, which bubblewrap, the
    tenant's, binds as its root with everything mounted on it. OSError where it cannot be."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"unshare: {os.strerror(code)}")
    _mount(None, "/", _MS_REC | _MS_SLAVE)
    _mount(rootfs, stage, _MS_BIND | _MS_REC)


def stage_binds(stage: str, binds: list[tuple[str, str, bool]]) -> None:
    """The engine's and the storages' bind mounts (host path, path in the container, read-only)
    made as root on the root file system at ``stage`` (``enter_stage``), each mount point reached
    without following a symbolic link. OSError where one cannot be made."""
    root = os.open(stage, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for source, target, read_only in binds:
            point = _beneath(root, target)
            try:
                _mount(source, f"/proc/self/fd/{point}", _MS_BIND | _MS_REC)
                if read_only:
                    # The new mount is on top of the descriptor's: reached again by its path.
                    again = _beneath(root, target)
                    try:
                        _mount(None, f"/proc/self/fd/{again}", _MS_BIND | _MS_REMOUNT | _MS_RDONLY)
                    finally:
                        os.close(again)
            finally:
                os.close(point)
    finally:
        os.close(root)


def stage_root(rootfs: str, stage: str, binds: list[tuple[str, str, bool]]) -> None:
    """``enter_stage``, then ``stage_binds``."""
    enter_stage(rootfs, stage)
    stage_binds(stage, binds)


_CLONE_NEWUSER = 0x10000000


def tenant_userns(uid: int, gid: int, groups: list[int]) -> int:
    """A user namespace owned by the tenant ``uid`` that maps the tenant's uid, gid and
    supplementary groups (its team storages') to themselves and nothing else; a descriptor of
    it (bubblewrap's ``--userns``). A process made for it (forked, the tenant's, with no
    capability) makes it; root (this process) writes its maps, as an unprivileged process could
    map its own uid and gid only: the storages' gids would show as nobody's in the container.
    OSError where it cannot be made."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: a few system calls, then gone
        code = 1
        try:
            os.close(ready_r)
            os.close(done_w)
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            if libc.unshare(_CLONE_NEWUSER) == 0:
                os.write(ready_w, b"1")
                os.read(done_r, 1)
                code = 0
        finally:
            os._exit(code)
    os.close(ready_w)
    os.close(done_r)
    try:
        if os.read(ready_r, 1) != b"1":
            raise OSError(errno.EPERM, "a user namespace could not be made")
        with open(f"/proc/{pid}/uid_map", "w") as f:
            f.write(f"{uid} {uid} 1\n")
        gids = [gid, *(g for g in dict.fromkeys(groups) if g != gid)]
        with open(f"/proc/{pid}/gid_map", "w") as f:
            f.write("".join(f"{g} {g} 1\n" for g in gids))
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(ready_r)
        os.write(done_w, b"1")
        os.close(done_w)
        os.waitpid(pid, 0)


def in_userns(argv: list[str], fd: int) -> list[str]:
    """bubblewrap's arguments (after setpriv's) with the user namespace ``fd`` (``tenant_userns``)
    in place of one of its own making."""
    split = argv.index("--") + 1
    bwrap = argv[split:]
    at = bwrap.index("--unshare-user")
    bwrap[at : at + 1] = ["--userns", str(fd)]
    return argv[:split] + bwrap
