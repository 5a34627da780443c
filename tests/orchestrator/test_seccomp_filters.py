"""The engine's seccomp profile compiled by libseccomp into the program bubblewrap loads: the
kernel then answers each call as the profile says (run here under bubblewrap itself), and the
profile's rules are read as runc reads them."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from services.orchestrator.adapters.seccomp_filters import SeccompError, _action, _rules, compile_filter

pytest.importorskip("pyseccomp", reason="libseccomp's binding is a dependency of the platform")


def _run_under(program: bytes, tmp_path: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """``command`` under the compiled filter, as bubblewrap loads it for a task's script."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        pytest.skip("bubblewrap is not installed (make setup installs it)")
    path = tmp_path / "filter.bpf"
    path.write_bytes(program)
    fd = os.open(path, os.O_RDONLY)
    try:
        return subprocess.run(
            [bwrap, "--dev-bind", "/", "/", "--seccomp", str(fd), "--", *command],
            pass_fds=(fd,),
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        os.close(fd)


def test_a_call_the_profile_refuses_gets_the_profiles_errno_and_the_rest_run(tmp_path: Path) -> None:
    program = compile_filter(
        {
            "defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [
                {"names": ["getpid"], "action": "SCMP_ACT_ALLOW"},  # the default's own: left out
                {
                    # A name this libseccomp does not know is left out, not the rest of the rule.
                    "names": ["not_a_system_call_here", "mkdir", "mkdirat"],
                    "action": "SCMP_ACT_ERRNO",
                    "errnoRet": errno.EACCES,
                },
            ],
        }
    )
    refused = _run_under(program, tmp_path, "mkdir", str(tmp_path / "made"))
    assert refused.returncode != 0
    assert os.strerror(errno.EACCES) in refused.stderr
    assert not (tmp_path / "made").exists()
    allowed = _run_under(program, tmp_path, "touch", str(tmp_path / "touched"))
    assert allowed.returncode == 0, allowed.stderr
    assert (tmp_path / "touched").exists()


def test_the_default_action_with_its_errno_answers_every_call_not_listed(tmp_path: Path) -> None:
    listed = ["execve", "brk", "mmap", "munmap", "mprotect", "arch_prctl", "exit_group", "openat", "read"]
    listed += ["close", "fstat", "newfstatat", "pread64", "access", "set_tid_address", "rseq", "prlimit64"]
    listed += ["set_robust_list", "getrandom", "write", "uname", "futex", "readlink", "rt_sigaction"]
    program = compile_filter(
        {
            "defaultAction": "SCMP_ACT_ERRNO",
            "defaultErrnoRet": errno.EXDEV,
            "syscalls": [{"names": listed, "action": "SCMP_ACT_ALLOW"}],
        }
    )
    done = _run_under(program, tmp_path, "/bin/mkdir", str(tmp_path / "made"))
    assert done.returncode != 0
    assert os.strerror(errno.EXDEV) in done.stderr


def test_several_conditions_on_one_argument_are_one_rule_each() -> None:
    one = {"index": 0, "value": 0, "op": "SCMP_CMP_EQ"}
    other = {"index": 0, "value": 8, "op": "SCMP_CMP_EQ"}
    second = {"index": 1, "value": 1, "op": "SCMP_CMP_EQ"}
    assert _rules([one, other]) == [[one], [other]]
    assert _rules([one, second]) == [[one, second]]
    assert _rules([]) == [[]]


def test_a_profile_this_platform_cannot_load_is_refused_by_name() -> None:
    with pytest.raises(SeccompError, match="SCMP_ACT_NOTIFY"):
        compile_filter({"defaultAction": "SCMP_ACT_NOTIFY"})
    with pytest.raises(SeccompError, match="SCMP_ARCH_SPARC"):
        compile_filter({"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_SPARC"]})


def _kill_rule(*conditions: dict[str, object]) -> bytes:
    """``kill`` refused (ENOTSUP) when its signal argument meets ``conditions``; all else allowed."""
    return compile_filter(
        {
            "defaultAction": "SCMP_ACT_ALLOW",
            "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"],
            "syscalls": [
                {
                    "names": ["kill"],
                    "action": "SCMP_ACT_ERRNO",
                    "errnoRet": errno.ENOTSUP,
                    "args": list(conditions),
                }
            ],
        }
    )


def _signals(program: bytes, tmp_path: Path) -> dict[str, bool]:
    """Which of ``kill -0``, ``kill -CONT`` and ``kill -WINCH`` (ignored by a shell) a shell may send
    itself under ``program``."""
    script = (
        "for s in 0 CONT WINCH; do if kill -$s $$ 2>/dev/null; then echo $s=yes; else echo $s=no; fi; done"
    )
    done = _run_under(program, tmp_path, "/bin/sh", "-c", script)
    assert done.returncode == 0, done.stderr
    return {line.split("=")[0]: line.endswith("yes") for line in done.stdout.split()}


def test_a_rules_conditions_on_the_arguments_are_the_kernels(tmp_path: Path) -> None:
    equal = {"index": 1, "op": "SCMP_CMP_EQ"}  # no value: 0, as the OCI runtimes read it
    assert _signals(_kill_rule(equal), tmp_path) == {"0": False, "CONT": True, "WINCH": True}
    # MASKED_EQ: ``value`` the mask, ``valueTwo`` what the masked argument must equal (runc's reading).
    cont = {"index": 1, "value": 0xFF, "valueTwo": int(signal.SIGCONT), "op": "SCMP_CMP_MASKED_EQ"}
    assert _signals(_kill_rule(cont), tmp_path) == {"0": True, "CONT": False, "WINCH": True}
    # Two conditions on one argument: either refuses (one rule each), not both at once (never).
    both = {"index": 1, "value": int(signal.SIGCONT), "op": "SCMP_CMP_EQ"}
    assert _signals(_kill_rule(equal, both), tmp_path) == {"0": False, "CONT": False, "WINCH": True}
    above = {"index": 1, "value": int(signal.SIGCONT), "op": "SCMP_CMP_GT"}
    assert _signals(_kill_rule(above), tmp_path) == {"0": True, "CONT": True, "WINCH": False}


class _Lib:
    """The constants compile_filter takes from pyseccomp, as distinct numbers."""

    ALLOW, KILL_THREAD, KILL_PROCESS, TRAP, LOG = 1, 2, 3, 4, 5

    @staticmethod
    def ERRNO(code: int) -> int:
        return 1000 + code

    @staticmethod
    def TRACE(code: int) -> int:
        return 2000 + code


@pytest.mark.parametrize(
    ("name", "errno_ret", "expected"),
    [
        ("SCMP_ACT_ALLOW", None, _Lib.ALLOW),
        ("SCMP_ACT_ERRNO", 13, 1013),
        ("SCMP_ACT_ERRNO", None, 1038),
        ("SCMP_ACT_KILL", None, _Lib.KILL_THREAD),
        ("SCMP_ACT_KILL_THREAD", None, _Lib.KILL_THREAD),
        ("SCMP_ACT_KILL_PROCESS", None, _Lib.KILL_PROCESS),
        ("SCMP_ACT_TRAP", None, _Lib.TRAP),
        ("SCMP_ACT_LOG", None, _Lib.LOG),
        ("SCMP_ACT_TRACE", 7, 2007),
        ("SCMP_ACT_TRACE", None, 2038),
    ],
)
def test_each_oci_action_is_libseccomps_own(name: str, errno_ret: int | None, expected: int) -> None:
    assert _action(_Lib, name, errno_ret, 38) == expected


def test_a_rule_this_platform_cannot_load_is_refused_by_name() -> None:
    with pytest.raises(SeccompError, match="SCMP_CMP_SOMETIMES"):
        compile_filter(
            {
                "defaultAction": "SCMP_ACT_ALLOW",
                "syscalls": [
                    {
                        "names": ["kill"],
                        "action": "SCMP_ACT_ERRNO",
                        "args": [{"index": 1, "op": "SCMP_CMP_SOMETIMES"}],
                    }
                ],
            }
        )
    with pytest.raises(SeccompError, match="SCMP_ACT_NOTIFY"):
        compile_filter(
            {
                "defaultAction": "SCMP_ACT_ALLOW",
                "syscalls": [{"names": ["kill"], "action": "SCMP_ACT_NOTIFY"}],
            }
        )


def test_an_exec_filter_allows_what_nsenter_needs_over_the_profiles_refusal_and_refuses_the_rest(
    tmp_path: Path,
) -> None:
    """`pai job exec` into a bubblewrap container loads the profile with setns and chroot allowed
    (ENTRY_CALLS), whatever the profile says of them (Podman's refuses chroot without
    CAP_SYS_CHROOT by a rule of its own): the rest of the profile holds."""
    from services.orchestrator.adapters.seccomp_filters import ENTRY_CALLS

    profile = {
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [
            {"names": ["chroot"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM},
            {"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EACCES},
        ],
    }
    root = tmp_path / "root"
    root.mkdir()
    chroot = shutil.which("chroot") or "chroot"
    refused = _run_under(compile_filter(profile), tmp_path, chroot, str(root), "/nothing")
    assert os.strerror(errno.EPERM) in refused.stderr, refused.stderr
    entering = compile_filter(profile, ENTRY_CALLS)
    # Past the chroot: the program is not found in the empty root (not refused entry).
    entered = _run_under(entering, tmp_path, chroot, str(root), "/nothing")
    assert os.strerror(errno.EPERM) not in entered.stderr, entered.stderr
    assert entered.returncode == 127, entered.stderr
    still = _run_under(entering, tmp_path, "mkdir", str(tmp_path / "made"))
    assert os.strerror(errno.EACCES) in still.stderr
    assert not (tmp_path / "made").exists()


def test_a_profile_without_user_namespaces_refuses_one_and_still_runs_threads_and_children(
    tmp_path: Path,
) -> None:
    """The platform's profile (core/bundles.py no_user_namespaces over the engine's rules): the
    kernel refuses a new user namespace with EPERM, while a program that starts a thread
    (clone3 refused: the C library falls back to clone) and a child still runs."""
    import sys

    from services.orchestrator.core.bundles import no_user_namespaces

    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare (util-linux)")
    allowed = ["read", "write", "clone", "clone3", "unshare", "execve", "exit_group", "wait4"]
    profile = {
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": allowed, "action": "SCMP_ACT_ALLOW"}],
    }
    assert _run_under(compile_filter(profile), tmp_path, unshare, "-U", "true").returncode == 0
    program = compile_filter(
        {**profile, "syscalls": no_user_namespaces(profile["syscalls"], os.uname().machine)}
    )
    refused = _run_under(program, tmp_path, unshare, "-U", "true")
    assert refused.returncode != 0
    assert os.strerror(errno.EPERM) in refused.stderr, refused.stderr
    threads = (
        "import subprocess, threading; t = threading.Thread(target=print, args=('thread',)); t.start(); "
        "t.join(); subprocess.run(['true'], check=True); print('child')"
    )
    ran = _run_under(program, tmp_path, sys.executable, "-c", threads)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["thread", "child"]
