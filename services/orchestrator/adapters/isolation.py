"""What a local task may see of the machine it shares with the platform.

A task is a user's code. When the platform runs as root, the task's commands run as an
unprivileged user (``PAI_TASK_USER``, default: the system user ``pai-task``, created if missing),
in a working directory of its own under the data dir; the data dir and every secret in it are
readable by the platform only (0700 directories, 0600 files), the directories leading to a
task's own being passages its user's group may cross without listing them (0710).

It gets an environment of its own, built from a short list of the
host's variables that programs need (PATH, locale, time zone, library paths), never the
orchestrator's: nothing of the bus (PAI_NATS_URL, its user and password), the data dir, the
database or any other platform setting reaches it. The runtime adds the task's PAI_* variables.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog

# Host variables a task inherits: what finds programs and libraries and how text is shown.
# Everything else of the orchestrator's environment (PAI_*, credentials, proxies with
# passwords, cloud keys) stays with the platform.
_PASSED = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "LD_LIBRARY_PATH", "TMPDIR"})
_PASSED_PREFIXES = ("LC_",)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

log = structlog.get_logger(__name__)


def task_environment(host: Mapping[str, str], **extra: str) -> dict[str, str]:
    """The environment a task's runtime starts with: the passed host variables, then ``extra``."""
    env = {
        name: value for name, value in host.items() if name in _PASSED or name.startswith(_PASSED_PREFIXES)
    }
    env.setdefault("PATH", DEFAULT_PATH)
    env.update(extra)
    return env


# -- the task's user -----------------------------------------------------------------------

# The user tasks run as when the platform runs as root and the admin chose nothing else:
# a system user of its own, so a task's files and processes belong to no real user or service.
TASK_USER = "pai-task"
FALLBACK_USER = "nobody"


class TaskUserError(ValueError):
    """The configured task user cannot be used; the message names the setting and the fix."""


@dataclass(frozen=True)
class TaskUser:
    name: str
    uid: int
    gid: int


def _lookup(name: str) -> TaskUser | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return TaskUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def _create_system_user(name: str) -> TaskUser | None:
    useradd = shutil.which("useradd")
    if useradd is None:
        return None
    nologin = shutil.which("nologin") or "/bin/false"
    options = ["--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent"]
    done = subprocess.run(
        [useradd, *options, "--shell", nologin, "--comment", "tasks of the AI platform", name],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        log.warning("cannot create the task user", user=name, error=done.stderr.strip())
    return _lookup(name)


def resolve_task_user(setting: str) -> TaskUser | None:
    """Who tasks run as; None: as the platform's own user.

    ``auto`` (the default): when the platform runs as root, the system user ``pai-task``,
    created if missing (``nobody`` if it cannot be created); otherwise the platform's user.
    ``none``: the platform's user, whoever that is (the admin's explicit choice). Any other
    value names an existing user.
    """
    setting = setting.strip()
    if setting in ("none", ""):
        return None
    root = os.geteuid() == 0
    if setting == "auto":
        if not root:
            return None
        user = _lookup(TASK_USER) or _create_system_user(TASK_USER) or _lookup(FALLBACK_USER)
        if user is None:
            raise TaskUserError(
                f"PAI_TASK_USER=auto: neither {TASK_USER} (useradd failed) nor {FALLBACK_USER} exists; "
                "create a user for tasks and name it in PAI_TASK_USER, or set PAI_TASK_USER=none"
            )
        return user
    user = _lookup(setting)
    if user is None:
        raise TaskUserError(
            f"PAI_TASK_USER={setting}: no such user; create it, or use auto (a user of the platform's "
            "own when it runs as root) or none (tasks run as the platform's user)"
        )
    if user.uid == os.geteuid():
        return None
    if not root:
        raise TaskUserError(
            f"PAI_TASK_USER={setting}: only a platform running as root can run tasks as another user; "
            "use auto or none"
        )
    return user


# -- the data dir --------------------------------------------------------------------------

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
# A directory on the way to a task's own: its user may pass through (by group), list nothing.
PASSAGE_DIR = 0o710


def secure_data_dir(data_dir: Path, user: TaskUser | None) -> None:
    """The data dir and what is in it readable by the platform only.

    What is directly under it (secrets, credentials, the database, logs, the bus's store) is
    made 0600/0700 (new files are created so by the platform's umask). The data dir and
    ``jobs/`` are passages for the task user's group when tasks run as another user.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    jobs = data_dir / "jobs"
    jobs.mkdir(exist_ok=True)
    for entry in data_dir.iterdir():
        if entry == jobs or entry.is_symlink():
            continue
        with contextlib.suppress(OSError):
            entry.chmod(PRIVATE_DIR if entry.is_dir() else PRIVATE_FILE)
    for passage in (data_dir, jobs):
        _passage(passage, user)
    if user is not None:
        closed = [p for p in data_dir.resolve().parents if not _crossable(p, user)]
        if closed:
            log.warning(
                "the task user cannot reach its working directories under the data dir; "
                "absolute paths there fail in tasks",
                task_user=user.name,
                closed=str(closed[0]),
                fix=f"chmod o+x {closed[0]} (it stays unlistable), or put the data dir where "
                "other users may pass, e.g. pai up --data-dir /var/lib/pai",
            )


def _crossable(directory: Path, user: TaskUser) -> bool:
    info = directory.stat()
    if info.st_uid == user.uid:
        return bool(info.st_mode & 0o100)
    if info.st_gid == user.gid:
        return bool(info.st_mode & 0o010)
    return bool(info.st_mode & 0o001)


def _passage(directory: Path, user: TaskUser | None) -> None:
    if user is None:
        directory.chmod(PRIVATE_DIR)
        return
    os.chown(directory, -1, user.gid)
    directory.chmod(PASSAGE_DIR)


def prepare_task_dir(data_dir: Path, directory: Path, user: TaskUser | None) -> None:
    """A task's directory: the way to it a passage, its work dir its user's own.

    Inside ``directory`` (root's): ``work/`` belongs to the task user (0700), ``logs/`` is the
    runtime's and readable by the task's group, the spec readable by that group, the secrets
    file and the lock root's only.
    """
    jobs = data_dir / "jobs"
    relative = directory.relative_to(jobs)
    current = jobs
    for part in relative.parts:
        current = current / part
        current.mkdir(exist_ok=True)
        _passage(current, user)
    work = directory / "work"
    logs = directory / "logs"
    work.mkdir(exist_ok=True)
    logs.mkdir(exist_ok=True)
    if user is None:
        work.chmod(PRIVATE_DIR)
        logs.chmod(PRIVATE_DIR)
        return
    os.chown(work, user.uid, user.gid)
    work.chmod(PRIVATE_DIR)
    os.chown(logs, -1, user.gid)
    logs.chmod(0o750)


def share_with_task(path: Path, user: TaskUser | None) -> None:
    """A file of the platform's the task may read (its spec): group-readable by the task user."""
    if user is None:
        path.chmod(PRIVATE_FILE)
        return
    os.chown(path, -1, user.gid)
    path.chmod(0o640)
