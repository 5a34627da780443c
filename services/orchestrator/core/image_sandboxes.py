"""A task's container run by bubblewrap: the engine's OCI configuration as bubblewrap's arguments.

runc costs some 40 ms of CPU for each container on the 2-core machine, nearly all of it its own
work (a Go program started twice, cgroups in each of cgroup v1's ten hierarchies, the seccomp
rules compiled again for every container). What a task's container is made of (a root file
system, mounts, namespaces, a user, no capability, a seccomp filter) is what bubblewrap does for
a host task already, in a C program of a few milliseconds. Where the platform runs as root with
both tools, the executor therefore runs each script of a task in its image so
(runtime/running.py):

    root (the runtime, once per task, in a mount namespace of its own): the task's overlay at
      ``STAGE`` (a path every tenant may reach) and the engine's bind mounts in it (the work
      dir, hosts, resolv.conf, hostname: the tenant may not reach them where the data dir lies)
    -> setpriv (to the tenant: its uid, gid and groups, no capability, no_new_privs)
      -> bwrap (a user namespace of the tenant's that maps its uid, gid and storage groups to
                themselves, made by root for it; ``STAGE`` as the root, the engine's other
                mounts, masked and read-only paths, PID, IPC and UTS namespaces, the engine's
                seccomp filter compiled, adapters/seccomp_filters.py)
        -> the image's entrypoint and the runtime's loader

Nothing of the container is written by hand: the OCI configuration is the engine's (Podman's
template of the image, core/bundles.py patches it for the task), and this module only says it
in bubblewrap's words; a configuration asking for what bubblewrap is not given to do here (a
capability, a mount type it does not know) is refused (TemplateError). The kernel enforces the
rest: the user namespace maps the tenant's ids only, so the image's root is nobody's (a
setuid-root binary runs as the tenant, and no_new_privs keeps file capabilities away too);
nothing in the namespace holds a capability once bubblewrap has made the mounts. The task's CPU,
memory and process limits are its own cgroups' (the runtime and everything it starts are in
them): a script's container adds none of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from services.orchestrator.core.bundles import TemplateError
from services.orchestrator.core.sandboxes import SandboxTools

STAGE = "/run/pai-task-root"
"""Where root mounts the task's root file system, in a mount namespace of the runtime's own,
before bubblewrap binds it as ``/``: a path every tenant may reach (runtime/container.py)."""
ENGINE_INIT = "/run/podman-init"
"""The engine's init, bound into its containers: bubblewrap's own init reaps in its place."""
_NAMESPACES = {
    "pid": "--unshare-pid",
    "ipc": "--unshare-ipc",
    "uts": "--unshare-uts",
    "network": "--unshare-net",
}
_IN_PLACE = ("mount", "user", "cgroup")
"""Namespaces the sandbox has anyway (a mount and a user namespace) or does without (a cgroup
namespace: the cgroup tree is not shown at all, /sys/fs/cgroup is an empty read-only tmpfs)."""


@dataclass(frozen=True)
class SandboxedImage:
    """One task's container as bubblewrap runs it (each script adds its mounts and command)."""

    argv: list[str]
    """setpriv's arguments, then bubblewrap's up to the scripts' own mounts."""
    env: list[str]
    """The container's environment (``NAME=value``), the task's variables to be added."""
    entry: list[str]
    """The image's entrypoint, before the runtime's loader."""
    mount_points: list[tuple[str, str | None]]
    """(path in the root file system, the source bound there or None for a file system made
    there): each must exist in the task's root file system before bubblewrap runs, as the user
    the sandbox runs as cannot make them in the image's folders."""
    binds: list[tuple[str, str, bool]]
    """(host path, path in the container, read-only): the engine's bind mounts (the work dir,
    hosts, resolv.conf, hostname), made by root in the root file system before bubblewrap runs
    (runtime/container.py ``stage_binds``): the tenant bubblewrap runs as may not reach them where
    the platform's data dir lies (under a folder only root may pass through)."""


def _size(options: list[str]) -> list[str]:
    for option in options:
        name, _, value = option.partition("=")
        if name == "size" and value:
            units = {"k": 1024, "m": 1024**2, "g": 1024**3}
            factor = units.get(value[-1].lower(), 1)
            number = value[:-1] if value[-1].lower() in units else value
            return ["--size", str(int(number) * factor)]
    return []


def _perms(options: list[str]) -> list[str]:
    mode = next((o.partition("=")[2] for o in options if o.startswith("mode=")), "")
    return ["--perms", mode.rjust(4, "0")] if mode else []


def _mount(mount: Mapping[str, Any]) -> list[str]:
    """One OCI mount in bubblewrap's words ([] for one the sandbox has without it)."""
    kind, target = str(mount.get("type") or ""), str(mount.get("destination") or "")
    options = [str(o) for o in mount.get("options") or []]
    if kind == "proc":
        return ["--proc", target]
    if kind == "tmpfs" and target == "/dev":
        return ["--dev", target]  # the safe device nodes, /dev/pts and /dev/shm's folder
    if kind == "devpts":
        return []  # bubblewrap's /dev has its own instance
    if kind == "mqueue":
        return ["--mqueue", target]
    if kind == "sysfs":
        return ["--ro-bind", "/sys", target]
    if kind == "cgroup":
        return ["--tmpfs", target, "--remount-ro", target]
    if kind == "tmpfs":
        return [*_perms(options), *_size(options), "--tmpfs", target]
    if kind == "bind" or "bind" in options or "rbind" in options:
        source = str(mount.get("source") or "")
        return ["--ro-bind" if "ro" in options else "--bind", source, target]
    raise TemplateError(f"a mount of type {kind!r} at {target} is not one bubblewrap makes here")


def _inside(path: str, folders: list[str]) -> bool:
    return any(path != f and path.startswith(f.rstrip("/") + "/") for f in folders)


def image_sandbox(
    config: Mapping[str, Any],
    tools: SandboxTools,
    *,
    present: Callable[[str], bool | None],
) -> SandboxedImage:
    """bubblewrap's view of the task's OCI configuration ``config`` (core/bundles.py's
    ``bundle_config``). ``present(path)`` says whether a masked or read-only path of the
    configuration exists on this kernel (True: a folder, False: a file, None: absent): the
    engine lists paths some kernels do not have."""
    process, linux, root = config.get("process"), config.get("linux"), config.get("root")
    if not isinstance(process, Mapping) or not isinstance(linux, Mapping) or not isinstance(root, Mapping):
        raise TemplateError("the configuration has no process, linux or root section")
    hooks = sorted(kind for kind, listed in (config.get("hooks") or {}).items() if listed)
    if hooks:  # CDI's device hooks (ldcache, symlinks): an OCI runtime's to run, not bubblewrap's
        raise TemplateError(f"the container has the engine's {', '.join(hooks)} hooks: bubblewrap runs none")
    capabilities = process.get("capabilities") or {}
    granted = sorted({c for kind in capabilities.values() for c in kind or []})
    if granted:
        raise TemplateError(f"the container is granted {', '.join(granted)}: bubblewrap runs tasks with none")
    user = process.get("user") or {}
    uid, gid = int(user["uid"]), int(user["gid"])
    if uid == 0:
        raise TemplateError("a task's container never runs as root")
    groups = [int(g) for g in user.get("additionalGids") or [] if int(g) != gid]
    drop = [
        tools.setpriv,
        f"--reuid={uid}",
        f"--regid={gid}",
        f"--groups={','.join(str(g) for g in [gid, *groups])}",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]
    wrap = [
        tools.bwrap,
        "--unshare-user",
        "--uid",
        str(uid),
        "--gid",
        str(gid),
        "--die-with-parent",
    ]
    for namespace in linux.get("namespaces") or []:
        kind = str(namespace.get("type") or "")
        if namespace.get("path"):
            raise TemplateError(f"the container joins an existing {kind} namespace: not one bubblewrap makes")
        if kind in _NAMESPACES:
            wrap.append(_NAMESPACES[kind])
            if kind == "uts" and config.get("hostname"):
                wrap += ["--hostname", str(config["hostname"])]
        elif kind not in _IN_PLACE:
            raise TemplateError(f"a {kind} namespace is not one bubblewrap makes")
    wrap += ["--bind", STAGE, "/"]
    entry = [str(a) for a in process.get("args") or []]
    made: list[str] = []  # file systems made inside the root: what lies under them is theirs
    points: list[tuple[str, str | None]] = []
    binds: list[tuple[str, str, bool]] = []
    for mount in config.get("mounts") or []:
        target = str(mount.get("destination") or "")
        if target == ENGINE_INIT:
            if entry[:2] == [ENGINE_INIT, "--"]:
                entry = entry[2:]
            continue
        words = _mount(mount)
        if not words:
            continue
        bound = words[0] in ("--bind", "--ro-bind") and str(mount.get("type")) != "sysfs"
        if bound:
            binds.append((words[1], target, words[0] == "--ro-bind"))
        else:
            wrap += words
        if not _inside(target, made):
            points.append((target, words[1] if bound else None))
        made.append(target)  # what lies below it is its file system's (or its source's)
    for device in linux.get("devices") or []:
        path = str(device.get("path") or "")
        wrap += ["--dev-bind", path, path]
    for path in linux.get("maskedPaths") or []:
        found = present(str(path))
        if found is True:
            wrap += ["--tmpfs", str(path), "--remount-ro", str(path)]
        elif found is False:
            wrap += ["--ro-bind", "/dev/null", str(path)]
    for path in linux.get("readonlyPaths") or []:
        if present(str(path)) is not None:
            wrap += ["--ro-bind", str(path), str(path)]
    if root.get("readonly"):
        wrap += ["--remount-ro", "/"]
    wrap += ["--chdir", str(process.get("cwd") or "/")]
    return SandboxedImage(
        argv=[*drop, *wrap],
        env=[str(e) for e in process.get("env") or []],
        entry=entry,
        mount_points=points,
        binds=binds,
    )
