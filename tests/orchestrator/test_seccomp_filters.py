"""The engine's seccomp profile compiled by libseccomp into the program bubblewrap loads: the
kernel then answers each call as the profile says (run here under bubblewrap itself), and the
profile's rules are read as runc reads them."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from services.orchestrator.adapters.seccomp_filters import SeccompError, _rules, compile_filter

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
                {"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EACCES},
                {"names": ["not_a_system_call_here"], "action": "SCMP_ACT_ERRNO"},
                {"names": ["getpid"], "action": "SCMP_ACT_ALLOW"},  # the default's own: left out
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
