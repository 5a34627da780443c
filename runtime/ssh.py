"""The ssh plugin: job-wide keys, user keys and an ssh config naming every peer.

With ``jobssh`` every task of the job shares one key pair, so MPI-style launchers can reach any
peer as ``<role>-<index>``. The pair lives in a directory shared by the job's tasks; the first
task to need it creates it under a file lock, with the ``ssh-keygen`` binary when installed or the
``cryptography`` package when importable (the result file says which). Files go to
``<work dir>/.ssh``: ``id_job`` (+ ``.pub``), ``authorized_keys`` and ``config``
(use ``ssh -F <work dir>/.ssh/config worker-0``). An ssh server is started only when ``sshd`` is
installed; without one the files are still written and the log says no server runs.

Parameters (OpenPAI's): jobssh: bool; userssh: {type: custom, value: "<keys>"};
sshbarrier: bool and sshbarrierTimeout: seconds, wait until every peer's ssh port answers.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import importlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runtime.confining import acting_as
from runtime.errors import PluginError
from runtime.spec import TaskSpec

PRIVATE_KEY = "id_job"
DEFAULT_SSH_BARRIER_TIMEOUT_S = 300.0


def _flag(value: Any) -> bool:
    return str(value).lower() == "true"


def _generate_with_ssh_keygen(binary: str, private: Path, comment: str) -> None:
    subprocess.run(
        [binary, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(private)],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _generate_with_cryptography(private: Path, comment: str) -> None:
    # Imported by name: the package is optional and may be absent.
    ed25519 = importlib.import_module("cryptography.hazmat.primitives.asymmetric.ed25519")
    serialization = importlib.import_module("cryptography.hazmat.primitives.serialization")
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    private.with_suffix(".pub").write_bytes(public + f" {comment}\n".encode())


def ensure_job_key_pair(key_dir: Path, comment: str) -> tuple[Path, str]:
    """The job key pair in ``key_dir``, created once; returns (private key path, how it was made)."""
    key_dir.mkdir(parents=True, exist_ok=True)
    private = key_dir / PRIVATE_KEY
    with open(key_dir / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if private.exists() and private.with_suffix(".pub").exists():
            return private, "existing"
        for stale in (private, private.with_suffix(".pub")):
            stale.unlink(missing_ok=True)
        binary = shutil.which("ssh-keygen")
        if binary:
            _generate_with_ssh_keygen(binary, private, comment)
            return private, "ssh-keygen"
        try:
            _generate_with_cryptography(private, comment)
        except ImportError as exc:
            raise PluginError(
                "ssh plugin: jobssh needs the ssh-keygen binary or the cryptography package; neither is here"
            ) from exc
        return private, "cryptography"


def ssh_config(task: TaskSpec, identity: Path, user: str) -> str:
    """One Host block per task of the attempt, named ``<role>-<index>``."""
    blocks = []
    for peer in task.tasks:
        ssh_ports = peer.ports.get("ssh")
        lines = [f"Host {peer.role}-{peer.index}", f"  HostName {peer.host_ip}"]
        if ssh_ports:
            lines.append(f"  Port {ssh_ports[0]}")
        lines += [
            f"  User {user}",
            "  StrictHostKeyChecking no",
            "  UserKnownHostsFile /dev/null",
            f"  IdentityFile {identity}",
        ]
        blocks.append("\n".join(lines) + "\n")
    return "".join(blocks)


def _login_name() -> str:
    """This process's user name; a uid the image's passwd does not list (a Kubernetes task pod runs
    as PodSettings.task_uid whatever the image) has none, and its number stands in."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # KeyError up to Python 3.12, OSError from 3.13
        return str(os.getuid())


def _write_private(path: Path, text: str) -> None:
    # O_NOFOLLOW: a symlink put in the file's place is refused, not written through.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _wait_for_ssh_ports(task: TaskSpec, timeout_s: float) -> list[str]:
    deadline = time.monotonic() + timeout_s
    pending = {
        f"{p.role}-{p.index}": (p.host_ip, p.ports["ssh"][0]) for p in task.tasks if p.ports.get("ssh")
    }
    while pending and time.monotonic() < deadline:
        for name, address in list(pending.items()):
            with contextlib.suppress(OSError), socket.create_connection(address, timeout=1):
                del pending[name]
        if pending:
            time.sleep(0.2)
    return sorted(pending)


def prepare_ssh(
    parameters: dict[str, Any], task: TaskSpec, env: dict[str, str], log: Callable[[str], None]
) -> dict[str, Any]:
    """Write keys and config; returns what was done, for the result file.

    The job's key pair lives in the platform's directory (read as the runtime's user); what goes
    into the task's work dir is written as the task's user (``acting_as``)."""
    ssh_dir = Path(".ssh")  # in the work dir, where acting_as moves
    report: dict[str, Any] = {"dir": str(task.dirs.work_dir / ssh_dir)}
    authorized: list[str] = []
    jobssh = _flag(parameters.get("jobssh", False))
    pair: tuple[str, str] | None = None
    if jobssh:
        key_dir = task.dirs.ssh_key_dir or task.dirs.barrier_dir / "job-ssh"
        private, how = ensure_job_key_pair(key_dir, f"pai-job-{task.job.uid}")
        pair = private.read_text(), private.with_suffix(".pub").read_text().strip()
        report["keygen"] = how
        log(f"ssh: job key pair {'reused' if how == 'existing' else 'generated with ' + how}")
    with acting_as(task.run_as, task.dirs.work_dir):
        ssh_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if pair is not None:
            _write_private(ssh_dir / PRIVATE_KEY, pair[0])
            authorized.append(pair[1])
            _write_private(ssh_dir / f"{PRIVATE_KEY}.pub", pair[1] + "\n")
            user = task.run_as.name if task.run_as is not None else _login_name()
            identity = task.dirs.work_dir / ssh_dir / PRIVATE_KEY
            _write_private(ssh_dir / "config", ssh_config(task, identity, user))
    userssh = parameters.get("userssh")
    if userssh:
        if not isinstance(userssh, dict) or userssh.get("type") not in ("custom", "system"):
            raise PluginError("ssh plugin parameters.userssh: must be {type: custom, value: <public keys>}")
        if userssh["type"] == "system":
            raise PluginError(
                "ssh plugin parameters.userssh.type: system keys are not available here; use custom"
            )
        value = str(userssh.get("value", ""))
        authorized.extend(line.strip() for line in value.splitlines() if line.strip())
    with acting_as(task.run_as, task.dirs.work_dir):
        _write_private(ssh_dir / "authorized_keys", "".join(k + "\n" for k in authorized))
    report["authorizedKeys"] = len(authorized)

    sshd = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else None)
    report["sshd"] = "present" if sshd else "absent"
    if not sshd:
        log("ssh: sshd is not installed, so no ssh server is started; keys and config are written")
    else:
        log(f"ssh: sshd is installed; the task's ssh port is {env.get('PAI_CONTAINER_SSH_PORT', 'unset')}")
    if jobssh and _flag(parameters.get("sshbarrier", False)):
        timeout = float(parameters.get("sshbarrierTimeout", DEFAULT_SSH_BARRIER_TIMEOUT_S))
        unreachable = _wait_for_ssh_ports(task, timeout)
        if unreachable:
            raise PluginError(f"ssh plugin: SSH barrier timed out; no ssh server answers on {unreachable}")
    return report
