"""A task on the host, sandboxed: the arguments that give its commands a view of their own.

A task that runs on the host (no container engine, or ``PAI_TASK_ENGINE=host``) is as contained
as one in a container, by the kernel's own means, through two well-kept tools:

- **bubblewrap** (``bwrap``) puts each of the task's command scripts in a PID namespace with a
  /proc of its own, so the task sees its own processes and no other: no argv, environ, fd or
  status of another tenant's task (or of the platform) is readable. Its storages are bind-mounted
  at their mount paths, as in a container (``/mnt`` is a tmpfs of the task's own, holding them).
  SysV IPC is the task's own too, except for a task on a GPU share, which talks to the node's
  MPS daemon. Everything else of the host's file system is the same, as the kernel's permissions
  already guard it (the task runs under a uid of its own). When the command ends, whatever it
  left running in its namespace ends with it, as a container's processes do;
- **setpriv** (util-linux) then drops to the tenant's uid and gid with no supplementary group
  but the gids of the team storages the task may mount (core/storage_groups.py), no capability
  (effective, permitted, inheritable, ambient or bounding) and ``no_new_privs``, so
  a setuid-root binary runs as the tenant, with nothing.

bubblewrap runs as root here (the runtime is the platform's): it needs no user namespace and no
setuid bit, and creates nothing on the host but a mount point that is missing.
"""

from __future__ import annotations

from dataclasses import dataclass

MNT = "/mnt"


@dataclass(frozen=True)
class SandboxTools:
    """The programs a host task's sandbox is made of (absolute paths)."""

    bwrap: str
    setpriv: str


def wrap_arguments(tools: SandboxTools, *, share_ipc: bool = False) -> list[str]:
    """bubblewrap's arguments up to the task's own mounts: the host's tree with a /proc and a
    /mnt of the task's own, in new PID (and IPC) namespaces, gone when the runtime is."""
    args = [
        tools.bwrap,
        "--dev-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--tmpfs",
        MNT,
        "--unshare-pid",
        "--die-with-parent",
    ]
    if not share_ipc:
        args.append("--unshare-ipc")
    return args


def drop_arguments(tools: SandboxTools, uid: int, gid: int, groups: tuple[int, ...] = ()) -> list[str]:
    """setpriv's arguments, up to the command: the tenant's ids (and its team storages' groups,
    core/storage_groups.py) and nothing of root's."""
    return [
        tools.setpriv,
        f"--reuid={uid}",
        f"--regid={gid}",
        f"--groups={','.join(str(g) for g in groups)}" if groups else "--clear-groups",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]
