"""The engine's seccomp profile of a container (its OCI configuration's ``linux.seccomp``) as the
BPF program the kernel loads, compiled once per image's template by libseccomp (through
pyseccomp, its ctypes binding), the same library runc compiles it with for every container.

bubblewrap loads the program (``--seccomp FD``) in each script's sandbox, after its mounts and
before the command (core/image_sandboxes.py). The rules are read as runc reads them: an action
equal to the default one is left out (libseccomp refuses it), a system call this libseccomp does
not know is left out, several conditions on one argument are one rule each (libseccomp cannot
test an argument twice in one rule), ``SCMP_CMP_MASKED_EQ`` takes ``value`` as the mask and
``valueTwo`` as what the masked argument must equal. A system call made through an architecture
the profile does not list (the 32-bit ABI of an x86_64 machine) kills the thread (SIGSYS).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from typing import Any

ARCHES = {
    "SCMP_ARCH_X86_64": "X86_64",
    "SCMP_ARCH_X86": "X86",
    "SCMP_ARCH_X32": "X32",
    "SCMP_ARCH_AARCH64": "AARCH64",
    "SCMP_ARCH_ARM": "ARM",
    "SCMP_ARCH_PPC64LE": "PPC64LE",
    "SCMP_ARCH_S390X": "S390X",
    "SCMP_ARCH_RISCV64": "RISCV64",
}
OPS = {
    "SCMP_CMP_NE": "NE",
    "SCMP_CMP_LT": "LT",
    "SCMP_CMP_LE": "LE",
    "SCMP_CMP_EQ": "EQ",
    "SCMP_CMP_GE": "GE",
    "SCMP_CMP_GT": "GT",
    "SCMP_CMP_MASKED_EQ": "MASKED_EQ",
}


class SeccompError(Exception):
    """The profile cannot be compiled here (no libseccomp, or a rule it refuses)."""


def _action(lib: Any, name: str, errno_ret: int | None, fallback_errno: int) -> int:
    if name == "SCMP_ACT_ALLOW":
        return int(lib.ALLOW)
    if name == "SCMP_ACT_ERRNO":
        return int(lib.ERRNO(errno_ret if errno_ret is not None else fallback_errno))
    if name in ("SCMP_ACT_KILL", "SCMP_ACT_KILL_THREAD"):
        return int(lib.KILL_THREAD)
    if name == "SCMP_ACT_KILL_PROCESS":
        return int(lib.KILL_PROCESS)
    if name == "SCMP_ACT_TRAP":
        return int(lib.TRAP)
    if name == "SCMP_ACT_LOG":
        return int(lib.LOG)
    if name == "SCMP_ACT_TRACE":
        return int(lib.TRACE(errno_ret if errno_ret is not None else fallback_errno))
    raise SeccompError(f"the seccomp action {name} is not one this platform loads")


def _rules(args: list[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """The conditions of one OCI rule as libseccomp rules: one, or one per condition where an
    argument is tested more than once (any of them then allows the call, as runc reads it)."""
    indexes = [int(a.get("index", 0)) for a in args]
    if len(set(indexes)) == len(indexes):
        return [args]
    return [[a] for a in args]


ENTRY_CALLS = ("setns", "chroot")
"""What `pai job exec`'s nsenter needs that a profile for a container without capabilities
refuses: joining the container's namespaces and its root. Its filter allows them besides the
profile (runtime/entering.py loads it before nsenter; the command inherits it): a command of the
tenant's, with no capability, may then join or chroot only where its own user namespace rules."""


def compile_filter(profile: Mapping[str, Any], allow: tuple[str, ...] = ()) -> bytes:
    """The BPF program of the OCI seccomp section ``profile``, the system calls ``allow`` names
    allowed besides. SeccompError where it cannot be."""
    try:
        import pyseccomp as lib
    except (ImportError, OSError) as exc:
        raise SeccompError(f"libseccomp cannot be loaded: {exc}") from exc
    default_errno = int(profile.get("defaultErrnoRet") or errno.EPERM)
    default = _action(lib, str(profile.get("defaultAction") or ""), default_errno, default_errno)
    try:
        rules = lib.SyscallFilter(default)
        native = lib.system_arch()
        for arch in profile.get("architectures") or []:
            known = ARCHES.get(str(arch))
            if known is None:
                raise SeccompError(f"the seccomp architecture {arch} is not one this platform knows")
            value = getattr(lib.Arch, known)
            if value != native and not rules.exist_arch(value):
                rules.add_arch(value)
        for syscall in profile.get("syscalls") or []:
            ret = syscall.get("errnoRet")
            action = _action(lib, str(syscall.get("action") or ""), ret, errno.EPERM)
            if action == default:
                continue
            for conditions in _rules(list(syscall.get("args") or [])):
                args = [
                    lib.Arg(
                        int(c.get("index", 0)),
                        getattr(lib, OPS[str(c.get("op"))]),
                        int(c.get("value", 0)),
                        int(c.get("valueTwo", 0)),
                    )
                    for c in conditions
                ]
                for name in syscall.get("names") or []:
                    if name in allow:
                        continue  # allowed below, whatever the profile says of it
                    try:
                        number = lib.resolve_syscall(lib.Arch.NATIVE, str(name))
                    except (ValueError, OSError):
                        continue  # a call this libseccomp does not know
                    if number < 0:
                        continue
                    rules.add_rule(action, number, *args)
        for name in allow if default != int(lib.ALLOW) else ():
            rules.add_rule(int(lib.ALLOW), lib.resolve_syscall(lib.Arch.NATIVE, name))
        with os.fdopen(os.memfd_create("seccomp"), "w+b") as program:
            rules.export_bpf(program)
            program.seek(0)
            return program.read()
    except KeyError as exc:
        raise SeccompError(f"the seccomp comparison {exc} is not one this platform knows") from exc
    except OSError as exc:
        raise SeccompError(f"libseccomp refused the profile: {exc}") from exc
