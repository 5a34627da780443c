"""A task's OCI bundle: the engine's own configuration of its image, patched for the task.

Where ``runc`` is installed beside Podman the local executor runs a task's containers with runc
itself (adapters/bundling.py): ``podman run`` costs a client, a monitor (conmon) and the OCI
runtime for every command script, some 150 ms of CPU on two cores, where runc alone on a
prepared bundle costs 40. Nothing of what the engine decides is written by
hand here: the executor has the engine create one container per image with the task arguments
of core/containers.py (the same security flags: no capability, no-new-privileges, the engine's
default seccomp profile, its masked and read-only paths, its init), reads the OCI configuration
the engine generated for it, and removes it. This module turns that template into one task's
configuration, changing only what differs from task to task:

- the process: its user (the tenant's uid and gid, no other group but its team storages'), its
  working directory (the task's work dir), and its arguments up to the command (the engine's
  init and the image's entrypoint; the runtime adds the script's loader, runtime/container.py);
- the root filesystem: the task's own overlay over the image (read-write, dropped at its end);
- the mounts: the work dir at the same path instead of the template's, the engine's files
  (hosts, resolv.conf, hostname) from the executor's copies, read-only, ``/dev/shm`` a tmpfs of
  the task's size, and the task's own mounts (the MPS pipe directory);
- its cgroup, nested under the task's memory group as ``--cgroup-parent`` nests it (the runtime
  names the leaf after each script's container), and its CPU, process and (where the task has no
  group of its own) memory limits;
- annotations naming the platform, the job and the task.

Once per template (``native_abi_only``), the engine's seccomp filter is narrowed to the machine's
own system-call ABI: Podman's default lists x86_64, x86 and x32 (or arm64 and arm) so that 32-bit
binaries run. A task of this platform is a 64-bit program; a system call made through the 32-bit
ABI (``int $0x80`` from an x86_64 process) is a path the kernel's bugs and filter bypasses have
used, and the engine's rules for it cost every container's init a third of runc's CPU (40 ms
against 27 on the 2-core machine) to compile. Narrowed, the kernel kills a thread that makes
such a call (SIGSYS), tests/security/test_sandbox.py shows it.

The same filter refuses a new user namespace (``no_user_namespaces``): Podman's profile allows
``unshare`` and ``clone`` of every kind so that containers may nest (rootless Podman in Podman),
which gives a tenant's command a root of its own over namespaces of its own, the kernel's
user-namespace code (a source of privilege escalations) within its reach. As Kubernetes'
RuntimeDefault profile does, ``clone`` and ``unshare`` with ``CLONE_NEWUSER`` get EPERM and
``clone3`` (whose flags a filter cannot read) ENOSYS, on which the C library falls back to
``clone``. Every other use of them stays allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.orchestrator.core.containers import ContainerPlan, run_arguments, shm_mib

TEMPLATE_COMMAND = ("/bin/sh",)
"""The command the template is created with: what follows the init and the image's entrypoint in
its arguments, taken off again (each script's container runs the runtime's loader instead)."""
CPU_PERIOD_US = 100_000
SHM = "/dev/shm"
MIB = 1024 * 1024
_PER_CONTAINER_ANNOTATIONS = ("io.kubernetes.cri-o.Created",)


SECCOMP_ARCHES = {
    "x86_64": "SCMP_ARCH_X86_64",
    "aarch64": "SCMP_ARCH_AARCH64",
    "ppc64le": "SCMP_ARCH_PPC64LE",
    "s390x": "SCMP_ARCH_S390X",
    "riscv64": "SCMP_ARCH_RISCV64",
}
"""The seccomp architecture of each machine's native ABI (``platform.machine()``)."""


class TemplateError(ValueError):
    """The engine's configuration is not what a task's can be made from (an engine that changed)."""


def template_arguments(plan: ContainerPlan) -> list[str]:
    """``create ...`` for the template: the task's run arguments, the image and the template's
    command (the plan's per-task values are placeholders the patch replaces)."""
    if plan.engine != "podman":
        raise TemplateError("a bundle's template is made by Podman")
    return ["create", *run_arguments(plan)[1:], plan.image, *TEMPLATE_COMMAND]


def _entry_args(process: Mapping[str, Any]) -> list[str]:
    args = [str(a) for a in process.get("args") or []]
    tail = len(TEMPLATE_COMMAND)
    if len(args) < tail or tuple(args[-tail:]) != TEMPLATE_COMMAND:
        raise TemplateError(f"the template's arguments {args} do not end with its command")
    return args[:-tail]


def _file_mount(mount: Mapping[str, Any], source: str) -> dict[str, Any]:
    options = [str(o) for o in mount.get("options") or [] if o not in ("rw", "ro")]
    return {**mount, "source": source, "options": [*options, "ro"]}


def _bind(source: str, target: str, read_only: bool) -> dict[str, Any]:
    return {
        "destination": target,
        "type": "bind",
        "source": source,
        "options": ["rbind", "rprivate", "ro" if read_only else "rw"],
    }


def _shm(memory_mb: int) -> dict[str, Any]:
    size = shm_mib(memory_mb)
    return {
        "destination": SHM,
        "type": "tmpfs",
        "source": "shm",
        "options": ["nosuid", "noexec", "nodev", "mode=1777", f"size={size}m"],
    }


def _resources(resources: Mapping[str, Any], plan: ContainerPlan) -> dict[str, Any]:
    patched = {key: value for key, value in resources.items() if key != "memory"}
    patched["pids"] = {**(resources.get("pids") or {}), "limit": plan.pids}
    period = int((resources.get("cpu") or {}).get("period") or CPU_PERIOD_US)
    patched["cpu"] = {**(resources.get("cpu") or {}), "period": period, "quota": int(plan.cpus * period)}
    if not plan.cgroup_parent:
        limit = plan.memory_mb * MIB
        patched["memory"] = {**(resources.get("memory") or {}), "limit": limit, "swap": limit}
    return patched


def bundle_config(
    template: Mapping[str, Any],
    plan: ContainerPlan,
    *,
    rootfs: str,
    template_work_dir: str,
    files: Mapping[str, str],
) -> dict[str, Any]:
    """The task's OCI configuration: ``template`` (the engine's, for a container of the same image
    made with ``template_arguments``) with the task's values; ``files`` maps the destination of
    each file the engine made for the template to the executor's copy of it. The template is not
    changed (its seccomp profile is shared, not copied)."""
    process = template.get("process")
    linux = template.get("linux")
    if not isinstance(process, Mapping) or not isinstance(linux, Mapping):
        raise TemplateError("the template has no process or no linux section")
    uid, _, gid = plan.user.partition(":")
    user = {**(process.get("user") or {}), "uid": int(uid), "gid": int(gid or uid)}
    user["additionalGids"] = [user["gid"], *(g for g in plan.groups if g != user["gid"])]
    mounts: list[dict[str, Any]] = []
    for mount in template.get("mounts") or []:
        target = mount.get("destination")
        if target == template_work_dir:
            continue
        if target == SHM:
            mounts.append(_shm(plan.memory_mb))
        elif target in files:
            mounts.append(_file_mount(mount, files[target]))
        else:
            mounts.append(dict(mount))
    mounts.append(_bind(plan.work_dir, plan.work_dir, False))
    mounts += [_bind(source, target, read_only) for source, target, read_only in plan.mounts]
    parent = plan.cgroup_parent or str(linux.get("cgroupsPath") or "/").rpartition("/")[0]
    annotations = {
        key: value
        for key, value in (template.get("annotations") or {}).items()
        if key not in _PER_CONTAINER_ANNOTATIONS
    }
    annotations.update(dict(plan.labels))
    return {
        **template,
        "process": {**process, "args": _entry_args(process), "cwd": plan.work_dir, "user": user},
        "root": {"path": rootfs, "readonly": False},
        "mounts": mounts,
        "annotations": annotations,
        "linux": {
            **linux,
            "resources": _resources(linux.get("resources") or {}, plan),
            "cgroupsPath": f"{parent.rstrip('/')}/{plan.name}",
        },
    }


CLONE_NEWUSER = 0x10000000
_NEW_PROCESSES = ("clone", "clone3", "unshare")


def _flags(index: int, value: int) -> list[dict[str, Any]]:
    return [{"index": index, "value": CLONE_NEWUSER, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"}]


def no_user_namespaces(syscalls: Any, machine: str) -> list[Any]:
    """A seccomp profile's rules (OCI's or Podman's, the same shape) with no new user namespace:
    ``clone`` and ``unshare`` that the rules allowed whatever their arguments are allowed without
    ``CLONE_NEWUSER`` only, and refused with it (EPERM); ``clone3`` ENOSYS. Nothing the rules did
    not allow is allowed; applying it twice changes nothing more."""
    flags = 1 if machine.startswith("s390") else 0  # clone's flags: its second argument there
    ours: list[dict[str, Any]] = [
        {"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": _flags(flags, 0)},
        {"names": ["unshare"], "action": "SCMP_ACT_ALLOW", "args": _flags(0, 0)},
        {"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1, "args": _flags(flags, CLONE_NEWUSER)},
        {"names": ["unshare"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1, "args": _flags(0, CLONE_NEWUSER)},
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
    ]
    allowed: set[str] = set()  # clone and unshare where the rules allowed them whatever their flags
    kept: list[Any] = []
    for rule in syscalls if isinstance(syscalls, list) else []:
        if not isinstance(rule, Mapping):
            kept.append(rule)
            continue
        names = rule.get("names") or []
        unconditional = rule.get("action") == "SCMP_ACT_ALLOW" and not rule.get("args")
        if rule in ours or (unconditional and set(names) & set(_NEW_PROCESSES)):
            if rule.get("action") == "SCMP_ACT_ALLOW":
                allowed.update(name for name in names if name in ("clone", "unshare"))
            rest = [name for name in names if name not in _NEW_PROCESSES]
            if rest and rule not in ours:
                kept.append({**rule, "names": rest})
            continue
        kept.append(rule)
    return kept + [r for r in ours if r["action"] != "SCMP_ACT_ALLOW" or r["names"][0] in allowed]


def native_abi_only(template: Mapping[str, Any], machine: str) -> dict[str, Any]:
    """``template`` with its seccomp filter for ``machine``'s native ABI only (its other
    architectures dropped), and no new user namespace (``no_user_namespaces``). The ABI is left
    as it is where the machine is unknown, the filter names no architecture, or does not list
    the native one (the engine's decision stands)."""
    linux = template.get("linux")
    seccomp = linux.get("seccomp") if isinstance(linux, Mapping) else None
    if not isinstance(seccomp, Mapping):
        return dict(template)
    assert isinstance(linux, Mapping)
    narrowed = {**seccomp, "syscalls": no_user_namespaces(list(seccomp.get("syscalls") or []), machine)}
    native = SECCOMP_ARCHES.get(machine)
    arches = seccomp.get("architectures")
    if native is not None and isinstance(arches, list) and native in arches:
        narrowed["architectures"] = [native]
    return {**template, "linux": {**linux, "seccomp": narrowed}}


def native_profile(profile: Mapping[str, Any], machine: str) -> dict[str, Any] | None:
    """The engine's seccomp profile file (Podman's ``seccomp.json``: ``archMap`` names each
    architecture and the sub-architectures its rules also cover) for ``machine``'s native ABI
    only; None where the machine is unknown or the profile has no entry for it (the engine's own
    profile then stands). The containers ``podman run`` starts take it through the platform's
    containers.conf, as the templates of the containers runc runs do."""
    native = SECCOMP_ARCHES.get(machine)
    entries = profile.get("archMap")
    if native is None or not isinstance(entries, list):
        return None
    for entry in entries:
        if isinstance(entry, Mapping) and entry.get("architecture") == native:
            syscalls = no_user_namespaces(list(profile.get("syscalls") or []), machine)
            return {**profile, "archMap": [{**entry, "subArchitectures": []}], "syscalls": syscalls}
    return None


def engine_files(template: Mapping[str, Any], container_id: str) -> dict[str, str]:
    """The bind mounts of files and folders the engine made for the template container itself
    (destination: source), which go with it: the executor keeps copies. ``/dev/shm`` is not one
    (each task's is a tmpfs of its own)."""
    found: dict[str, str] = {}
    for mount in template.get("mounts") or []:
        source, target = str(mount.get("source") or ""), str(mount.get("destination") or "")
        if mount.get("type") == "bind" and container_id in source and target != SHM:
            found[target] = source
    return found
