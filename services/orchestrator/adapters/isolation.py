"""What a local task may see of the machine it shares with the platform.

A task is a user's code. When the platform runs as root, the task's commands run as a uid of
their own tenant (``PAI_TASK_USER=auto``, the default): every platform user gets a uid and gid
from a reserved range, like systemd's DynamicUser (no login, no home, no entry in /etc/passwd),
never shared with another platform user, on this platform or any other on the machine (a claim
file per uid in a machine-wide registry, see ``TenantUids``). Processes of different tenants then
cannot read each other's /proc entries, signal or ptrace each other. ``PAI_TASK_USER=NAME``
runs every task as one named user instead (shared-trust mode: tenants can reach each other's
tasks), ``none`` as the platform's own user.

Each task has a working directory of its own under the data dir; the data dir and every secret
in it are readable by the platform only (0700 directories, 0600 files); the directories leading
to a task's own are passages (0711 above the jobs, then 0710 by the tenant's group) its user may
cross without listing them, and that no other tenant may enter.

It gets an environment of its own, built from a short list of the
host's variables that programs need (PATH, locale, time zone, library paths), never the
orchestrator's: nothing of the bus (PAI_NATS_URL, its user and password), the data dir, the
database or any other platform setting reaches it. The runtime adds the task's PAI_* variables.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pwd
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

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
    groups: tuple[int, ...] = ()
    """Supplementary groups: the gids of the team storages the task may mount."""


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


# -- a uid per tenant -----------------------------------------------------------------------

# Far above login users (1000+), system users (<1000), nobody (65534) and the subordinate ranges
# that user namespaces take (100000 + 65536 per user): a uid here belongs to no one else.
DEFAULT_UID_RANGE = (1_800_000_000, 1_800_999_999)
DEFAULT_UID_REGISTRY = Path("/var/lib/pai/uids")
USERS_FILE = "task-users.json"


class UidsExhaustedError(TaskUserError):
    """Every uid of the range is taken: a task cannot be given one (a platform failure, retried)."""


def parse_uid_range(text: str) -> tuple[int, int]:
    """``FIRST-LAST`` (PAI_TASK_UIDS) as a pair; TaskUserError names the setting and the form."""
    first, sep, last = text.strip().partition("-")
    if not sep or not first.strip().isdigit() or not last.strip().isdigit():
        raise TaskUserError(
            f"PAI_TASK_UIDS={text}: write the range as FIRST-LAST, e.g. 1800000000-1800999999"
        )
    low, high = int(first), int(last)
    if not 1000 <= low <= high < 2**32 - 1:
        raise TaskUserError(
            f"PAI_TASK_UIDS={text}: a range of uids from 1000 up to 4294967294, the first not above the last"
        )
    return low, high


@dataclass
class TenantUids:
    """A uid (and a gid of the same number) for each platform user, kept for good.

    The data dir remembers who has which (``task-users.json``); the machine-wide ``registry``
    holds one claim file per uid given out (naming the data dir and the user), created with
    O_EXCL under a lock, so two platforms on one machine never hand out the same uid. A uid with
    an entry in /etc/passwd is never taken."""

    data_dir: Path
    registry: Path = DEFAULT_UID_REGISTRY
    uid_range: tuple[int, int] = DEFAULT_UID_RANGE
    file: str = USERS_FILE
    """Where the data dir remembers them; team storages' gids have their own (same registry)."""
    prefix: str = ""
    """Before each name in its claim: a storage's claim never reads as a user's."""
    _known: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            stored = json.loads((self.data_dir / self.file).read_text())
            self._known = {str(k): int(v) for k, v in stored.items()}
        except (OSError, ValueError, AttributeError):
            self._known = {}

    def user(self, name: str) -> TaskUser:
        """The tenant's task user, given out at its first task."""
        uid = self._known.get(name)
        if uid is not None:
            self._confirm(uid, name)
            return TaskUser(name, uid, uid)
        with self._registry_locked():
            uid = self._claim_free(name)
        self._known[name] = uid
        path = self.data_dir / self.file
        tmp = path.with_name(f".{self.file}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
        with os.fdopen(fd, "w") as f:
            json.dump(self._known, f)
        os.replace(tmp, path)
        log.info("a tenant has its task uid", user=name, uid=uid)
        return TaskUser(name, uid, uid)

    def _claim_text(self, name: str) -> str:
        return json.dumps({"dataDir": str(self.data_dir.resolve()), "user": self.prefix + name})

    @contextlib.contextmanager
    def _registry_locked(self):  # type: ignore[no-untyped-def]
        self.registry.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        fd = os.open(self.registry / ".lock", os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _claim_free(self, name: str) -> int:
        taken = {int(p.name) for p in self.registry.iterdir() if p.name.isdigit()}
        low, high = self.uid_range
        for uid in range(low, high + 1):
            if uid in taken or _has_passwd_entry(uid):
                continue
            try:
                fd = os.open(self.registry / str(uid), os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w") as f:
                f.write(self._claim_text(name))
            return uid
        raise UidsExhaustedError(
            f"every task uid of PAI_TASK_UIDS={low}-{high} is taken ({self.registry} holds their claims); "
            "widen the range, or remove the claims of platforms that no longer exist"
        )

    def _confirm(self, uid: int, name: str) -> None:
        """The uid is still this tenant's in the machine's registry (re-claimed if the registry
        was wiped); another's claim on it stops the task rather than share a uid."""
        claim = self.registry / str(uid)
        try:
            text = claim.read_text()
        except FileNotFoundError:
            with self._registry_locked():
                with contextlib.suppress(FileExistsError):
                    fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
                    with os.fdopen(fd, "w") as f:
                        f.write(self._claim_text(name))
                text = claim.read_text()
        if json.loads(text) != json.loads(self._claim_text(name)):
            raise TaskUserError(
                f"task uid {uid} of user {name} is claimed by another platform ({claim}: {text}); "
                "it will not be shared: remove that claim if its platform is gone"
            )


def _has_passwd_entry(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


@dataclass
class TaskUsers:
    """Who a platform user's tasks run as: their tenant uid, one shared user, or the platform's."""

    mode: Literal["tenants", "shared", "platform"]
    shared: TaskUser | None = None
    tenants: TenantUids | None = None
    why: str = ""
    storages: TenantUids | None = None
    """The team storages' gids (adapters/storage_dirs.py), where tenants have uids of their own."""

    def for_user(self, name: str) -> TaskUser | None:
        if self.tenants is not None:
            return self.tenants.user(name)
        return self.shared

    def describe(self) -> str:
        if self.tenants is not None:
            low, high = self.tenants.uid_range
            return f"task users: a uid per platform user, from {low}-{high}"
        if self.shared is not None:
            return f"task users: every task as {self.shared.name} (uid {self.shared.uid}; shared trust)"
        return f"task users: the platform's own ({self.why})"


# The team storages' gids are claimed like tenants' uids, in a file and under a prefix of their own.
STORAGE_GIDS_FILE = "storage-gids.json"
STORAGE_CLAIM_PREFIX = "storage:"


def storage_gids(tenants: TenantUids) -> TenantUids:
    """The team storages' gids, beside the tenants' uids (same registry and range)."""
    return TenantUids(
        tenants.data_dir,
        tenants.registry,
        tenants.uid_range,
        file=STORAGE_GIDS_FILE,
        prefix=STORAGE_CLAIM_PREFIX,
    )


def resolve_task_users(setting: str, data_dir: Path, *, uid_range: str = "", registry: str = "") -> TaskUsers:
    """PAI_TASK_USER as a policy. ``auto`` (the default): a uid per tenant when the platform
    runs as root, else the platform's user; ``tenant``: the same, refused when not root;
    ``none``: the platform's user; a user name: that user for every task (shared trust)."""
    setting = setting.strip()
    root = os.geteuid() == 0
    if setting in ("auto", "tenant"):
        if not root:
            if setting == "tenant":
                raise TaskUserError(
                    "PAI_TASK_USER=tenant: only a platform running as root can give tasks uids of "
                    "their own; run pai up as root, or use auto"
                )
            return TaskUsers("platform", why="the platform is not root")
        tenants = TenantUids(
            data_dir,
            Path(registry) if registry else DEFAULT_UID_REGISTRY,
            parse_uid_range(uid_range) if uid_range else DEFAULT_UID_RANGE,
        )
        return TaskUsers("tenants", tenants=tenants, storages=storage_gids(tenants))
    shared = resolve_task_user(setting)
    if shared is None:
        return TaskUsers("platform", why="PAI_TASK_USER=none")
    return TaskUsers("shared", shared=shared)


# -- the data dir --------------------------------------------------------------------------

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
# A directory on the way to a task's own: its user may pass through (by group), list nothing.
PASSAGE_DIR = 0o710
# Above every tenant's own: anyone may pass, nobody may list.
OPEN_PASSAGE_DIR = 0o711


# Kept as their maker set them: the NVIDIA MPS daemon's pipes, which shared tasks of any task
# user connect to (`pai up` makes mps/ a passage, pai/embedded/mps.py).
PASSED_THROUGH = frozenset({"mps"})


def secure_data_dir(data_dir: Path, user: TaskUser | None, *, tenants: bool = False) -> None:
    """The data dir and what is in it readable by the platform only.

    What is directly under it (secrets, credentials, the database, logs, the bus's store) is
    made 0600/0700 (new files are created so by the platform's umask). The data dir and
    ``jobs/`` are passages for the task user's group when tasks run as another user; with a
    user per tenant, passages anyone may cross (0711) and list nothing of: each job's own
    directory is then the tenant's group's passage, closed to other tenants.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    jobs = data_dir / "jobs"
    jobs.mkdir(exist_ok=True)
    for entry in data_dir.iterdir():
        if entry == jobs or entry.is_symlink() or entry.name in PASSED_THROUGH:
            continue
        with contextlib.suppress(OSError):
            entry.chmod(PRIVATE_DIR if entry.is_dir() else PRIVATE_FILE)
    for passage in (data_dir, jobs):
        if tenants:
            os.chown(passage, -1, os.getegid())
            passage.chmod(OPEN_PASSAGE_DIR)
        else:
            _passage(passage, user)
    if tenants:
        # Every tenant's uid must pass through the folders above the data dir: as "others".
        closed = [p for p in data_dir.resolve().parents if not p.stat().st_mode & 0o001]
        if closed:
            log.warning(
                "tasks cannot reach their working directories under the data dir; "
                "absolute paths there fail in tasks",
                closed=str(closed[0]),
                fix=f"chmod o+x {closed[0]} (it stays unlistable), or put the data dir where "
                "other users may pass, e.g. pai up --data-dir /var/lib/pai",
            )
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


def containment_line(data_dir: Path, environ: Mapping[str, str]) -> str:
    """What holds for local tasks, in one line for ``pai up``: who they run as, which limits are
    enforced and by what, which are not and why (the orchestrator decides the same way)."""
    from services.orchestrator.adapters.confinement import detect  # the cgroups' side of it

    try:
        users = resolve_task_users(
            environ.get("PAI_TASK_USER", "auto"),
            data_dir,
            uid_range=environ.get("PAI_TASK_UIDS", ""),
            registry=environ.get("PAI_TASK_UID_REGISTRY", ""),
        )
        who = users.describe()
    except TaskUserError as exc:
        who = f"task users: none ({exc})"
    from services.orchestrator.adapters.sandboxing import detect_sandbox

    try:
        sandbox = detect_sandbox(environ.get("PAI_TASK_SANDBOX", "auto")).describe()
    except ValueError as exc:
        sandbox = f"host tasks: {exc}"
    return f"{who}; {detect(data_dir).describe()}; {sandbox}"


def engine_line(data_dir: Path, environ: Mapping[str, str]) -> str:
    """Where local tasks run, in one line for ``pai up``: the container engine and its runtime,
    or why on the host (the orchestrator decides the same way)."""
    from services.orchestrator.adapters.engines import detect_engine, pull_policy

    try:
        choice = detect_engine(
            environ.get("PAI_TASK_ENGINE", "auto"), data_dir, environ.get("PAI_CONTAINER_RUNNER", "auto")
        )
        pull = pull_policy(environ.get("PAI_IMAGE_PULL", "missing"))
    except ValueError as exc:
        return f"task engine: {exc}"
    if choice.engine is None:
        return choice.describe()
    if environ.get("PAI_IMAGE_MISSING", "pull").strip().lower() == "host":
        return f"{choice.describe()}; a task whose image is not here runs on the host (PAI_IMAGE_MISSING)"
    return f"{choice.describe()}; images pulled: {pull} (PAI_IMAGE_PULL)"
