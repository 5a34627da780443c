"""The local executor: each task attempt is a task runtime in its own session.

The runtime is forked by the runtime's fork server (forking.py, runtime/forkserver.py), one warm
process per executor that has paid for the interpreter and the runtime's imports once; without
one (it failed to start three times, or `fork_server=False`) it is a new `python -S -m runtime`
process. Either way it is named `python -S -m runtime --spec FILE`.

Why tasks survive the orchestrator, and how a restarted orchestrator never starts one twice:

- every task runs in its own session, so it is its own process group and outlives the
  orchestrator and the fork server (a kill -9 of either leaves tasks running);
- before starting it, the executor takes an exclusive `flock` on `task.lock` in the task's
  directory and hands that descriptor to the runtime (over the fork server's socket, or
  `pass_fds`); the runtime holds the lock for as long as it lives, and the kernel drops it the
  instant the process ends. The lock is therefore the task's liveness, immune to pid reuse:
  "lock held" means running;
- if the lock cannot be taken, a process for this task attempt already runs: nothing is started;
- the pid is written to `pid` once the runtime is in its own session; the runtime writes its own
  logs and `runtime-result.json` under `logs/`.

On start-up `probe()` classifies every task the framework state may own: lock held -> alive
(adopted and watched by polling the lock); lock free with a result, a pid file or any log ->
ended (its exit is reported from the result file, or analysed as a platform failure); nothing
at all -> absent, i.e. its runtime never began, and only then is it started.

The exit of a task (its return code from the fork server, which reaps it, or from the spawned
child's pidfd; a forked task whose server is gone is watched by its lock instead) is handed to
`on_exit` (the app publishes task.completed from it). Stopping
sends SIGTERM to the process group, then SIGKILL after a grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import json
import os
import pwd
import shutil
import signal
import subprocess
import sysconfig
import warnings
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import structlog

import runtime
from libs.backbone.running import process_ended
from libs.failures import ContainerStatus, PodStatus, RuleSet, analyze, default_rules
from libs.protocol.capacity import disk_reserve_mb, task_disk_mb
from libs.protocol.events import FailureInfo
from runtime.exitcodes import from_returncode
from runtime.processes import find_runtimes, runtime_command
from runtime.reaping import kill_descendants
from runtime.spec import Confine, Container, RunAs, Runc, Sandbox, SpecError, TaskSpec, dump_spec, read
from services.orchestrator.adapters.bundling import (
    UPPER,
    Bundles,
    NotForBubblewrap,
    remove_rootfs,
    remove_task_containers,
)
from services.orchestrator.adapters.confinement import (
    CGROUP_ROOT,
    Confinement,
    ConfinementError,
    MemoryOutcome,
    TaskGroups,
)
from services.orchestrator.adapters.engines import (
    Engine,
    ImageLookups,
    ImageMissingError,
    PullPolicy,
    ResolvedImage,
    find_image,
    platform_label,
    remove_container,
    write_auth_file,
)
from services.orchestrator.adapters.executing import (
    AlreadyRunningError,
    ContainmentError,
    ExitCallback,
    SecretsSource,
    TaskExit,
    to_failure_info,
)
from services.orchestrator.adapters.forking import Forked, ForkServer, ForkServerLost
from services.orchestrator.adapters.isolation import (
    TaskUser,
    TaskUserError,
    TaskUsers,
    prepare_task_dir,
    secure_data_dir,
    share_with_task,
    task_environment,
)
from services.orchestrator.adapters.specs import (
    LOCK_FILE,
    LOG_FILES,
    PID_FILE,
    RUNTIME_OUT,
    SECRETS_FILE,
    SPEC_FILE,
    Peers,
    attempt_peers,
    build_spec,
    image_of,
    read_result,
    release_attempt_ports,
    task_dir,
)
from services.orchestrator.adapters.storage_dirs import storage_groups
from services.orchestrator.core.containers import (
    LABEL_JOB,
    LABEL_PLATFORM,
    LABEL_TASK,
    ContainerPlan,
    container_name,
    run_arguments,
)
from services.orchestrator.core.effects import Probe
from services.orchestrator.core.frameworks import Framework, TaskKey
from services.orchestrator.core.limits import task_limits
from services.orchestrator.core.policies import KILLED_EXIT_CODE, PREEMPTED_EXIT_CODE, STOP_EXIT_CODE
from services.orchestrator.core.sandboxes import SandboxTools, drop_arguments, wrap_arguments

log = structlog.get_logger(__name__)

_REPO_ROOT = Path(runtime.__file__).resolve().parents[1]
PEERS_KEPT = 16
SIGKILLED = 128 + signal.SIGKILL
OOM_EXIT_CODE = -1200
"""OpenPAI's UserContainerDockerOOMKilled: the task went past its memoryMB and was killed."""
PRIVATE_DIR = "private"
"""In a task's directory: the runtime's own files (command scripts), root's only."""
"""Job attempts whose roles and placements an executor keeps for the specs of their next tasks."""
FORK_SERVER_STARTS = 3
"""Fork servers started in a row without one of them forking a task before the executor gives
up on them and spawns every runtime (a server that forked a task earns the count back: an
orchestrator whose server is killed now and then keeps forking)."""


def runtime_path() -> str:
    """PYTHONPATH of a task's runtime: the platform's code, then this interpreter's packages (the
    runtime imports some only when needed: psutil to stop a task, PyYAML for secrets in YAML,
    the failure rules when a command fails)."""
    paths = dict.fromkeys(
        [str(_REPO_ROOT), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    )
    return os.pathsep.join(paths)


def lock_is_held(directory: Path) -> bool:
    """True while a task process holds the task's lock (i.e. it is alive)."""
    path = directory / LOCK_FILE
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def began(directory: Path) -> bool:
    """The attempt was launched in this directory before: its pid is on record, or its runtime
    wrote its logs (the first thing it does, before any user command)."""
    logs = directory / "logs"
    return (directory / PID_FILE).exists() or (logs.is_dir() and any(logs.iterdir()))


def _pid_of(directory: Path) -> int | None:
    try:
        return int((directory / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        pass
    # Started but not yet recorded when the orchestrator died: find it by its spec path.
    found = find_runtimes(directory / SPEC_FILE)
    return found[0].pid if found else None


def _container_of(directory: Path) -> str | None:
    """The name of the task's container, from its spec (None: it ran on the host)."""
    try:
        data = json.loads((directory / SPEC_FILE).read_bytes())
        run = (data.get("container") or {}).get("run") or []
        return str(run[run.index("--name") + 1]) if "--name" in run else None
    except (OSError, ValueError, TypeError, AttributeError, IndexError):
        return None


def _runc_of(directory: Path) -> Runc | None:
    """How runc ran the task's containers (from its spec; None: they were not run by runc)."""
    try:
        data = json.loads((directory / SPEC_FILE).read_bytes())
        runc = (data.get("container") or {}).get("runc")
        return read(Runc, runc, "container.runc") if runc else None
    except (OSError, ValueError, TypeError, AttributeError, SpecError):
        return None


def _sandboxed_image(directory: Path) -> bool:
    """Whether bubblewrap ran the task's containers (from its spec)."""
    try:
        data = json.loads((directory / SPEC_FILE).read_bytes())
        return bool((data.get("container") or {}).get("sandbox"))
    except (OSError, ValueError, TypeError, AttributeError):
        return False


def _runc_cgroup_parent(config: Path) -> str | None:
    """The cgroup parent of the task's containers under runc: the task's memory group, from its
    bundle (each script's container is a group below it)."""
    try:
        data = json.loads(config.read_bytes())
        path = str(data["linux"]["cgroupsPath"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return path.rpartition("/")[0] or None


def _cgroup_parent_of(directory: Path) -> str | None:
    """The cgroup parent the task's containers were given (from its spec)."""
    try:
        data = json.loads((directory / SPEC_FILE).read_bytes())
        run = (data.get("container") or {}).get("run") or []
        return str(run[run.index("--cgroup-parent") + 1]) if "--cgroup-parent" in run else None
    except (OSError, ValueError, TypeError, AttributeError, IndexError):
        return None


def remove_engine_groups(parent: str, own: set[Path]) -> None:
    """The groups an engine made at ``parent`` in each hierarchy for a task's containers (and its
    monitor's ``conmon`` below them), once they are empty; the task's own groups are left to
    the executor (only what the engine made inside them goes)."""
    relative = parent.strip("/")
    hierarchies = (
        {h.resolve() for h in CGROUP_ROOT.iterdir() if h.is_dir()} if CGROUP_ROOT.is_dir() else set()
    )
    for hierarchy in [*hierarchies, CGROUP_ROOT]:
        made = hierarchy / relative
        for directory in (made / "conmon", made):
            if directory in own or not directory.is_dir():
                continue
            with contextlib.suppress(OSError):
                directory.rmdir()


def _cgroups_of(directory: Path) -> list[Path]:
    """The cgroups the task's spec names (a restarted executor finds them there too)."""
    try:
        data = json.loads((directory / SPEC_FILE).read_bytes())
        return [Path(p) for p in (data.get("confine") or {}).get("cgroups") or []]
    except (OSError, ValueError, TypeError, AttributeError):
        return []


def out_of_memory(exit_: TaskExit, memory: MemoryOutcome | None, rules: RuleSet) -> TaskExit:
    """A failed task whose memory group killed a process for going past its limit ended by
    running out of memory: OpenPAI's -1200, whatever the command's own exit code said."""
    if memory is None or exit_.exit_code in (0, OOM_EXIT_CODE):
        return exit_
    # A kill in a container nested under the task's group is counted in the container's group,
    # gone with it: a SIGKILL'd task whose group met its limit was killed for its memory.
    at_limit = memory.limit_hits > 0 or 0 < memory.limit_bytes <= memory.peak_bytes
    killed_at_limit = at_limit and exit_.exit_code == SIGKILLED
    if memory.oom_kills == 0 and not killed_at_limit:
        return exit_
    mib = 1024 * 1024
    why = (
        f"the task went past its memory limit of {memory.limit_bytes // mib} MiB (memoryMB) and the "
        f"system killed it (peak {memory.peak_bytes // mib} MiB; it exited with {exit_.exit_code})"
    )
    # As Kubernetes reports it: the container's reason OOMKilled, matched by the rule of -1200.
    pod = PodStatus(containers=(ContainerStatus(reason="OOMKilled", message=why, exit_code=137),))
    verdict = analyze(rules, exit_code=None, platform_log=why, stage="platform", pod=pod)
    return TaskExit(exit_.job_id, exit_.key, OOM_EXIT_CODE, to_failure_info(verdict), why)


@dataclass(frozen=True)
class DiskShares:
    """The settings of the disk guard (None: the defaults of libs/protocol/capacity.py)."""

    task_mb: int | None = None
    reserve_mb: int | None = None
    every_s: float = 2.0


DISK_GRACE_S = 1.0


def over_disk(exit_: TaskExit, reason: str, why: str, rules: RuleSet) -> TaskExit:
    """A task stopped for disk, as a cluster reports it: its own share passed (a container's
    ``WorkDirTooLarge``) or the node's reserve reached (the pod ``Evicted``)."""
    if reason == "Evicted":
        pod = PodStatus(reason="Evicted", message=why)
    else:
        pod = PodStatus(containers=(ContainerStatus(reason=reason, message=why, exit_code=SIGKILLED),))
    verdict = analyze(rules, exit_code=None, platform_log=why, stage="platform", pod=pod)
    return TaskExit(exit_.job_id, exit_.key, verdict.code, to_failure_info(verdict), why)


def note_in_log(directory: Path, text: str) -> None:
    """A last line of the platform's in the task's log (all and stderr), as the runtime's notes
    are written; the files are the platform's (logs/ is root's), opened without following links."""
    data = f"[pai] {text}\n".encode()
    for name in (LOG_FILES["all"], LOG_FILES["stderr"]):
        try:
            fd = os.open(directory / "logs" / name, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


def tree_bytes(root: Path) -> int:
    """The disk space a directory tree takes (allocated blocks), on its own filesystem, without
    following links."""
    total = 0
    try:
        device = root.lstat().st_dev
    except OSError:
        return 0
    stack = [root]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            total += info.st_blocks * 512
            if entry.is_dir(follow_symlinks=False) and info.st_dev == device:
                stack.append(Path(entry.path))
    return total


class TaskProcess(subprocess.Popen[bytes]):
    """A task's runtime. It outlives an executor that stops watching it (a restarted orchestrator
    adopts it), so being dropped while it runs is expected, not a leak: Popen still reaps it
    later (on a later start), and says nothing of it."""

    def __del__(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            super().__del__()


async def child_exit(proc: subprocess.Popen[bytes], poll_seconds: float) -> int:
    """The return code of a child of this process, awaited without a thread on its pidfd
    (process_ended); where there are no pidfds its state is polled."""
    if await process_ended(proc.pid):
        return proc.wait()  # ended: reaps it at once
    while (code := proc.poll()) is None:  # noqa: ASYNC110 - no pidfd: nothing to wait on
        await asyncio.sleep(poll_seconds)
    return code


def _kill_task_tree(pid: int) -> None:
    """SIGKILL a task's runtime and everything below it: its descendants first (while the
    runtime lives, orphans are re-parented to it and stay found), then its process group."""
    kill_descendants(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class LocalExecutor:
    def __init__(
        self,
        data_dir: Path,
        on_exit: ExitCallback,
        secrets: SecretsSource,
        *,
        grace_seconds: float = 10.0,
        poll_seconds: float = 0.5,
        rules: Callable[[], RuleSet] = default_rules,
        task_user: TaskUser | None = None,
        fork_server: bool = True,
        task_users: TaskUsers | None = None,
        confinement: TaskGroups | None = None,
        mps_pipe_dir: Path | None = None,
        engine: Engine | None = None,
        image_pull: PullPolicy = "missing",
        image_missing: Literal["pull", "host"] = "pull",
        sandbox: SandboxTools | None = None,
        disk: DiskShares | None = None,
        container_starts: int | None = None,
    ) -> None:
        self.data_dir = data_dir
        # Each task's share of the data dir's filesystem, and the platform's reserve on it.
        self.disk = disk
        self._disk_guard: asyncio.Task[None] | None = None
        # Tasks stopped for disk: (reason, why), the reason as a cluster would report it.
        self._disk_stopped: dict[tuple[str, TaskKey], tuple[str, str]] = {}
        # What host tasks' commands run in (None: unsandboxed); see core/sandboxes.py.
        self.sandbox = sandbox
        # The container engine tasks run in their images through (None: on the host).
        self.engine = engine
        self.image_pull: PullPolicy = image_pull
        # An image not on the node: pulled as image_pull says, or the task on the host (make up).
        self.image_missing = image_missing
        self._platform_label = platform_label(data_dir)
        # Where runc runs the containers itself: the images' mounts and templates it keeps.
        self._bundles = (
            Bundles(engine, data_dir, self._platform_label)
            if engine is not None and engine.runner in ("runc", "bwrap")
            else None
        )
        # Starts of tasks in their images in flight at once: a burst of them queues here rather
        # than thrash the machine (each is an image look, a bundle, a runtime and its container).
        self._starts = asyncio.Semaphore(container_starts or 2 * (os.cpu_count() or 1))
        # The images of the attempts whose tasks start now, resolved once per attempt and image.
        self._images: OrderedDict[tuple[str, int, str], ResolvedImage] = OrderedDict()
        # What the engine said of each image, while its list of images is unchanged.
        self._lookups = ImageLookups()
        # The node's NVIDIA MPS control daemon, where one runs: shared tasks are its clients.
        self.mps_pipe_dir = mps_pipe_dir
        # Who the tasks' commands run as: a uid per tenant, one user for all (``task_user``), or
        # this process's user; see isolation.py.
        if task_users is None:
            task_users = TaskUsers("shared", shared=task_user) if task_user else TaskUsers("platform")
        self.task_users = task_users
        self.task_user = task_users.shared
        secure_data_dir(data_dir, task_users.shared, tenants=task_users.tenants is not None)
        # The tasks' kernel limits (None: none, as before a platform said which it enforces).
        self.groups = confinement or TaskGroups(Confinement("none"))
        try:
            self._devices = Path("/proc/devices").read_text()
        except OSError:
            self._devices = ""
        self._on_exit = on_exit
        self._secrets = secrets
        self._grace = grace_seconds
        self._poll = poll_seconds
        self._rules_now = rules  # the operator's current rules, for exits the runtime did not explain
        self._watchers: dict[tuple[str, TaskKey], asyncio.Task[None]] = {}
        # Tasks this executor was told to end, with the exit code their end is reported as.
        self._stopping: dict[tuple[str, TaskKey], int] = {}
        # Stopped tasks' process trees being killed once their grace ran out.
        self._killing: set[asyncio.Future[None]] = set()
        # The runtime's fork server, started at the first task; started again after it is lost,
        # unless FORK_SERVER_STARTS of them in a row forked nothing: then every task's runtime
        # is a new interpreter.
        self._forks: ForkServer | None = None
        # The roles and placements of the attempts whose tasks start now, built once per attempt.
        self._peers: OrderedDict[tuple[str, int], Peers] = OrderedDict()
        self._forks_starting = asyncio.Lock()
        self._fork_starts_left = FORK_SERVER_STARTS if fork_server else 0

    def task_dir(self, job_id: str, key: TaskKey) -> Path:
        return task_dir(self.data_dir, job_id, key)

    async def start(self, framework: Framework, key: TaskKey) -> tuple[int, Path]:
        """Spawn the task attempt's runtime; returns its pid and directory.

        An attempt runs at most once: AlreadyRunningError if a process of it holds its lock, or if
        it was launched here before and has ended (a decision carried out again, with what it
        knew of the task out of date). The caller then adopts it or reports its end."""
        job_id = framework.job_id
        directory = self.task_dir(job_id, key)
        try:
            user = self.task_users.for_user(framework.user or "unknown")
            if user is not None and self.task_users.storages is not None and framework.storages:
                # The team storages it may mount, as their groups (core/storage_groups.py).
                groups = storage_groups(self.task_users.storages, framework.storages)
                user = dataclasses.replace(user, groups=groups)
        except TaskUserError as exc:
            raise ContainmentError(f"no task user for {framework.user}: {exc}") from exc
        prepare_task_dir(self.data_dir, directory, user)
        lock = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise AlreadyRunningError(f"{directory}: its process runs") from None
            if began(directory):
                raise AlreadyRunningError(f"{directory}: it ran before")
            if self.engine is None:
                pid, returncode = await self._launch(framework, key, directory, user, lock)
            else:
                async with self._starts:
                    pid, returncode = await self._launch(framework, key, directory, user, lock)
            (directory / PID_FILE).write_text(str(pid))
        except ForkServerLost:
            # The server died with the request: whether it forked the task first, the lock says
            # (or, if the task already ended, what it left in its directory).
            os.close(lock)
            lock = -1
            if lock_is_held(directory):
                raise AlreadyRunningError(f"{directory}: its process runs") from None
            return await self.start(framework, key)
        finally:
            if lock >= 0:
                os.close(lock)  # the child keeps its own copy, and with it the lock
        self._watch(job_id, key, self._wait_exit(job_id, key, returncode, directory))
        log.info("task started", job_id=job_id, key=list(key), pid=pid)
        return pid, directory

    async def _launch(
        self, framework: Framework, key: TaskKey, directory: Path, user: TaskUser | None, lock: int
    ) -> tuple[int, Awaitable[int]]:
        """The task's spec written and its runtime started: its pid, and its return code to await."""
        job_id = framework.job_id
        secrets = await self._secrets(job_id)
        if secrets:
            fd = os.open(directory / SECRETS_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(secrets, f)
        run_as = (
            RunAs(name=user.name, uid=user.uid, gid=user.gid, groups=list(user.groups))
            if user is not None
            else None
        )
        on_host = ""
        try:
            image = await self._image(framework, key, directory) if self.engine is not None else None
        except ImageMissingError:
            if self.image_missing != "host":
                raise
            image, on_host = None, "is not on this machine (PAI_IMAGE_MISSING=host)"
        if image is not None and image.pull and self.image_pull == "missing" and self.image_missing == "host":
            # Not on this machine, and this platform runs such tasks on the host (make up).
            image, on_host = None, "is not on this machine (PAI_IMAGE_MISSING=host)"
        spec = build_spec(
            self.data_dir,
            framework,
            key,
            directory,
            bool(secrets),
            run_as,
            self._notice(framework, key, user, image, on_host=on_host),
            self._attempt_peers(framework, key.job_attempt),
        )
        spec = self._confined(spec, directory, key)
        if spec.gpu_milli and self.mps_pipe_dir is not None:
            spec = spec.replace(mps_pipe_dir=self.mps_pipe_dir)
        if image is not None:
            spec = await self._in_image(spec, framework, key, directory, user, image)
        elif self.sandbox is not None and run_as is not None:
            sandbox = Sandbox(
                wrap=wrap_arguments(self.sandbox, share_ipc=spec.mps_pipe_dir is not None),
                drop=drop_arguments(self.sandbox, run_as.uid, run_as.gid, tuple(run_as.groups)),
            )
            spec = spec.replace(sandbox=sandbox)
        try:
            (directory / SPEC_FILE).write_text(dump_spec(spec, indent=2), encoding="utf-8")
            share_with_task(directory / SPEC_FILE, user)
            out = os.open(directory / RUNTIME_OUT, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                forked = await self._fork(directory, lock, out)
                pid, returncode = self._spawn(directory, lock, out) if forked is None else forked
            finally:
                os.close(out)
        except ForkServerLost:
            raise  # the start is tried again, or the task adopted: the bundle stays for it
        except Exception:
            bundled = spec.container is not None and (spec.container.runc or spec.container.sandbox)
            if bundled:
                await asyncio.to_thread(remove_rootfs, directory, directory / PRIVATE_DIR)
            raise
        return pid, returncode

    async def _fork(self, directory: Path, lock: int, out: int) -> Forked | None:
        """The task's runtime forked by the fork server, or None where there is none."""
        async with self._forks_starting:
            if self._forks is None or not self._forks.alive:
                if self._fork_starts_left <= 0:
                    return None
                self._fork_starts_left -= 1
                forks = ForkServer(self._task_env(), self.data_dir)
                try:
                    await forks.start()
                except ForkServerLost as exc:
                    log.warning("no fork server; this task starts as a new process", why=str(exc))
                    return None
                self._forks = forks
            forks = self._forks
        forked = await forks.spawn(directory / SPEC_FILE, directory, lock, out)
        self._fork_starts_left = FORK_SERVER_STARTS  # this server works: it earns the count back
        return forked

    def _task_env(self) -> dict[str, str]:
        # The platform's code is all the runtime needs of this process: none of its settings.
        return task_environment(os.environ, PYTHONPATH=runtime_path())

    def _spawn(self, directory: Path, lock: int, out: int) -> tuple[int, Coroutine[Any, Any, int]]:
        """The task's runtime as a new interpreter: its pid, and its return code to await."""
        os.set_inheritable(lock, True)
        # subprocess, not the event loop's subprocess_exec: it starts the child with vfork, 0.1 ms
        # of this process's CPU and 0.6 ms of the loop's time; uvloop forks, 2-3 ms of CPU, and
        # blocks the loop about 5 ms until the child has exec'd (bench/spawn_bench.py). The exit
        # is awaited on the child's pidfd (child_exit).
        proc = TaskProcess(
            runtime_command(directory / SPEC_FILE),
            cwd=str(directory),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=(lock,),
            env=self._task_env(),
        )
        return proc.pid, child_exit(proc, self._poll)

    async def _image(self, framework: Framework, key: TaskKey, directory: Path) -> ResolvedImage:
        """The task's image, pulled where the policy says so (once per attempt and image)."""
        assert self.engine is not None
        config = framework.config
        reference = image_of(config, key.role)
        ident = (framework.job_id, key.job_attempt, reference)
        found = self._images.get(ident)
        if found is None:
            found = await find_image(self.engine, reference, self.image_pull, self._lookups)
            self._images[ident] = found
            while len(self._images) > PEERS_KEPT:
                self._images.popitem(last=False)
        return found

    async def _in_image(
        self,
        spec: TaskSpec,
        framework: Framework,
        key: TaskKey,
        directory: Path,
        user: TaskUser | None,
        image: ResolvedImage,
    ) -> TaskSpec:
        """The spec with the container its commands run in: run by runc on the task's bundle,
        made now, where the executor runs them so (an image its runtime pulls first runs through
        the engine), else through the engine's run."""
        assert self.engine is not None
        resources = spec.role_info(spec.role).resources
        parent = self._cgroup_parent(spec.confine.cgroups if spec.confine else [])
        uid, gid = (user.uid, user.gid) if user is not None else (os.geteuid(), os.getegid())
        mounts: tuple[tuple[str, str, bool], ...] = ()
        if spec.mps_pipe_dir is not None:
            mounts = ((str(spec.mps_pipe_dir), str(spec.mps_pipe_dir), False),)
        plan = ContainerPlan(
            engine=self.engine.name,
            image=image.run,
            name=container_name(spec.job.uid, key.job_attempt, key.role, key.task_index, key.task_attempt),
            user=f"{uid}:{gid}",
            groups=user.groups if user is not None else (),
            work_dir=str(spec.dirs.work_dir),
            labels=(
                (LABEL_PLATFORM, self._platform_label),
                (LABEL_JOB, spec.job.uid),
                (LABEL_TASK, f"{key.job_attempt}.{key.role}-{key.task_index}.{key.task_attempt}"),
            ),
            memory_mb=resources.memory_mb,
            cpus=max(resources.cpu, self.groups.defaults.zero_cpu_cores),
            pids=self.groups.defaults.pids,
            cgroup_parent=parent,
            gpus=tuple(spec.gpu_indices),
            cdi=self.engine.cdi,
            mounts=mounts,
        )
        bundles, private = self._bundles, spec.dirs.private_dir
        sandboxed = None
        if (
            bundles is not None
            and not image.pull
            and private is not None
            and self.engine.runner == "bwrap"
            and user
        ):
            try:
                sandboxed = await bundles.sandbox(
                    plan, directory, private, SandboxTools(*self.engine.sandbox)
                )
            except NotForBubblewrap as exc:
                if not self.engine.runc:
                    raise
                log.info("runc runs this image's containers", image=image.run, why=str(exc))
        ran: dict[str, Any] = {}  # how the executor runs the containers of its bundle, if it does
        if sandboxed is not None:
            ran["sandbox"] = sandboxed
        elif bundles is not None and not image.pull and private is not None and self.engine.runc:
            config = await bundles.prepare(plan, directory, private)
            ran["runc"] = Runc(program=self.engine.runc, root=bundles.state, config=config, name=plan.name)
        if ran:
            container = Container(
                engine=self.engine.program,
                run=[],
                image=image.run,
                env=dict(self.engine.env),
                digest=image.digest,
                **ran,
            )
            return spec.replace(container=container)
        container = Container(
            engine=self.engine.program,
            run=run_arguments(plan),
            image=image.run,
            env=dict(self.engine.env),
            digest=image.digest,
            pull=image.pull,
            auth_file=self._auth_file(spec, framework, key) if image.pull else None,
        )
        return spec.replace(container=container)

    def _auth_file(self, spec: TaskSpec, framework: Framework, key: TaskKey) -> Path | None:
        """The role's registry credentials (its image prerequisite's auth) in a root-only file in
        the runtime's private folder, for the pull; None without credentials."""
        config = framework.config
        prerequisite = config.prerequisite("dockerimage", config.task_roles[key.role].docker_image)
        auth = getattr(prerequisite, "auth", None)
        if auth is None or not auth.username or spec.dirs.private_dir is None:
            return None
        return write_auth_file(spec.dirs.private_dir, auth.model_dump(exclude_none=True))

    def _cgroup_parent(self, groups: list[Path]) -> str | None:
        """The task's memory group as the engine names a cgroup parent: its path from its
        hierarchy's root. The engine makes the same path in every other hierarchy it uses (the
        task's own CPU and process groups may sit elsewhere): the container's CPU and processes
        are limited on the container itself, its memory by the task's group above it."""
        for controller, root in (("memory", CGROUP_ROOT / "memory"), ("unified", CGROUP_ROOT)):
            base = self.groups.confinement.bases.get(controller)
            group = next((g for g in groups if base is not None and g.parent == base), None)
            if group is not None:
                return "/" + str(group.relative_to(root))
        return None

    def _notice(
        self,
        framework: Framework,
        key: TaskKey,
        user: TaskUser | None,
        resolved: ResolvedImage | None = None,
        *,
        on_host: str = "",
    ) -> str:
        """Said plainly to the user: which image (or the host), which user, which directory."""
        image = image_of(framework.config, key.role)
        if user is None:
            who = f"user {pwd.getpwuid(os.geteuid()).pw_name}"
        elif self.task_users.tenants is not None:
            who = f"uid {user.uid} (the tasks of {user.name})"
        else:
            who = f"user {user.name}"
        work = self.task_dir(framework.job_id, key) / "work"
        if resolved is not None and self.engine is not None and resolved.pull:
            return (
                f"the docker image {image} is pulled first (PAI_IMAGE_PULL={self.image_pull}), then the "
                f"commands run in it through {self.engine.name}, as {who}, in directory {work} "
                "(mounted at the same path)"
            )
        if resolved is not None and self.engine is not None:
            pinned = resolved.digest or resolved.run
            through = self.engine.name
            if self._bundles is not None and self.engine.runner == "bwrap" and user is not None:
                through += " and bubblewrap"
            elif self._bundles is not None and self.engine.runc:
                through += " and runc"
            return (
                f"the commands run in the docker image {image} ({pinned}) through {through}, "
                f"as {who}, in directory {work} (mounted at the same path)"
            )
        if on_host:
            return (
                f"the docker image {image} {on_host}: the commands run on the host instead, as {who}, "
                f"in directory {work}; put the image on this machine (e.g. podman pull {image}) to run in it"
            )
        return (
            f"the docker image {image} was not used: this platform's local executor runs the "
            f"commands on the host, as {who}, in directory {work}"
        )

    def _confined(self, spec: TaskSpec, directory: Path, key: TaskKey) -> TaskSpec:
        """The spec with the task's limits and the runtime's private directory: its cgroups made
        now (ConfinementError if they cannot be: the task must not run unconfined)."""
        private = directory / PRIVATE_DIR
        private.mkdir(mode=0o700, exist_ok=True)
        dirs = spec.dirs.replace(private_dir=private)
        resources = spec.role_info(spec.role).resources
        limits = task_limits(
            resources.cpu, resources.memory_mb, spec.gpu_indices, self._devices, self.groups.defaults
        )
        confine: Confine | None = None
        if self.groups.uses_cgroups:
            attempt, role, index, task_attempt = key
            name = f"{spec.job.uid}.{attempt}.{role}-{index}.{task_attempt}"
            try:
                confine = Confine(cgroups=self.groups.create(name, limits))
            except ConfinementError as exc:
                raise ContainmentError(f"the task's limits could not be set: {exc}") from exc
        elif self.groups.confinement.mechanism == "rlimits":
            confine = Confine(rlimits={"RLIMIT_DATA": limits.memory_bytes})
        return spec.replace(dirs=dirs, confine=confine)

    def release(self, job_id: str, attempt: int) -> None:
        """The attempt is over: free its ports for other tasks on this node."""
        self._peers.pop((job_id, attempt), None)
        release_attempt_ports(self.data_dir, job_id, attempt)

    def _attempt_peers(self, framework: Framework, attempt: int) -> Peers:
        """The attempt's roles and placements, built at its first task (a few attempts kept)."""
        ident = (framework.job_id, attempt)
        peers = self._peers.get(ident)
        if peers is None:
            peers = self._peers[ident] = attempt_peers(self.data_dir, framework, attempt)
            while len(self._peers) > PEERS_KEPT:
                self._peers.popitem(last=False)
        self._peers.move_to_end(ident)
        return peers

    def adopt(self, job_id: str, key: TaskKey, pid: int, directory: Path) -> None:
        """Watch a task process found alive after a restart."""
        if (job_id, key) not in self._watchers:
            self._watch(job_id, key, self._poll_lock(job_id, key, directory))

    def probe(self, job_id: str, key: TaskKey) -> Probe:
        directory = self.task_dir(job_id, key)
        if lock_is_held(directory):
            return Probe("alive", _pid_of(directory), str(directory))
        return Probe("ended" if began(directory) else "absent", None, str(directory))

    async def stop(self, job_id: str, key: TaskKey, exit_code: int = -220) -> None:
        """SIGTERM the task's process group, SIGKILL after the grace period."""
        directory = self.task_dir(job_id, key)
        if not lock_is_held(directory):
            if (job_id, key) not in self._watchers:
                # No process and nobody watching: report the end ourselves.
                await self.report(job_id, key, default=exit_code)
            return
        pid = _pid_of(directory)
        if pid is None:
            log.warning(
                "a live task has no pid on record; it cannot be signalled", job_id=job_id, key=list(key)
            )
            return
        self._stopping[(job_id, key)] = exit_code
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
        asyncio.get_running_loop().call_later(self._grace, self._kill_if_alive, directory, pid)

    def _kill_if_alive(self, directory: Path, pid: int) -> None:
        if lock_is_held(directory):
            # Not the runtime's process group alone: what left it (setsid) is still the
            # runtime's, which reaps the task's orphans. Without cgroups this is all of it.
            task = asyncio.ensure_future(asyncio.to_thread(_kill_task_tree, pid))
            self._killing.add(task)
            task.add_done_callback(self._killing.discard)

    async def report(
        self, job_id: str, key: TaskKey, *, returncode: int | None = None, default: int = KILLED_EXIT_CODE
    ) -> None:
        """Hand the task's exit to the callback: from its result file, else a platform verdict."""
        directory = self.task_dir(job_id, key)
        # The runtime read its secrets at start; they need not outlive the task on disk.
        (directory / SECRETS_FILE).unlink(missing_ok=True)
        exit_ = self.exit_of(job_id, key, returncode=returncode, default=default)
        stopped_for_disk = self._disk_stopped.pop((job_id, key), None)
        if stopped_for_disk is not None:
            exit_ = over_disk(exit_, *stopped_for_disk, self._rules_now())
        await self._remove_container(directory, exit_)
        if stopped_for_disk is not None:
            # As a cluster removes an evicted pod's scratch space: the space is the point.
            await asyncio.to_thread(shutil.rmtree, directory / "work", True)
        groups = _cgroups_of(directory)
        if groups:
            exit_ = out_of_memory(exit_, self.groups.memory(groups), self._rules_now())
            self._remove_groups(groups)
        if exit_.exit_code == OOM_EXIT_CODE or stopped_for_disk is not None:
            # What the platform saw after the task ended: the log's last line, not only the API's.
            note_in_log(directory, exit_.diagnostics)
        await self._on_exit(exit_)

    async def _remove_container(self, directory: Path, exit_: TaskExit) -> None:
        """A container the task's runtime did not see end (the task was stopped, or its runtime
        killed) is removed: none is left behind once the task is over; nor are the cgroups the
        engine made for its containers under the task's parent path. A task whose containers runc
        ran has its overlay unmounted and its layer removed too, however it ended."""
        runc = _runc_of(directory)
        if runc is not None:
            await self._remove_runc(directory, runc)
            return
        if _sandboxed_image(directory):
            # bubblewrap's namespace ended with the runtime (--die-with-parent), what was left in
            # it with the task's cgroups: the overlay and its layer are all there is to remove.
            await asyncio.to_thread(remove_rootfs, directory, directory / PRIVATE_DIR)
            return
        if self.engine is None:
            return
        name = _container_of(directory)
        if name is None:
            return
        try:
            await self._remove_exited(directory, exit_, name)
        finally:
            parent = _cgroup_parent_of(directory)
            if parent:
                await asyncio.to_thread(remove_engine_groups, parent, set(_cgroups_of(directory)))

    async def _remove_runc(self, directory: Path, runc: Runc) -> None:
        try:
            await remove_task_containers(runc.program, runc.root, runc.name)
        finally:
            await asyncio.to_thread(remove_rootfs, directory, directory / PRIVATE_DIR)
            own = _cgroups_of(directory)
            parent = _runc_cgroup_parent(runc.config)
            if own and parent:
                await asyncio.to_thread(remove_engine_groups, parent, set(own))

    async def _remove_exited(self, directory: Path, exit_: TaskExit, name: str) -> None:
        assert self.engine is not None
        result = read_result(directory)
        if result is not None and not result.stopped_by and exit_.exit_code != OOM_EXIT_CODE:
            return  # the runtime saw its container end, and the engine removed it (--rm)
        try:
            await remove_container(self.engine, name)
        except ContainmentError as exc:
            log.warning("a task's container could not be removed", container=name, why=str(exc))

    def _remove_groups(self, groups: list[Path], tries: int = 20) -> None:
        """The task's cgroups, once what it left in them has died (a killed process leaves its
        group a moment later)."""
        busy = self.groups.remove(groups)
        if busy and tries > 0:
            asyncio.get_running_loop().call_later(self._poll, self._remove_groups, busy, tries - 1)

    def exit_of(
        self, job_id: str, key: TaskKey, *, returncode: int | None = None, default: int = KILLED_EXIT_CODE
    ) -> TaskExit:
        directory = self.task_dir(job_id, key)
        result = read_result(directory)
        stopped_as = self._stopping.get((job_id, key))
        ended_on_its_own = result is not None and not result.stopped_by
        if stopped_as is not None and not ended_on_its_own:
            raw = result.exit_code if result is not None else returncode
            return TaskExit(
                job_id, key, stopped_as, None, f"ended by the platform (the process exited with {raw})"
            )
        if result is not None:
            code = result.exit_code
            if result.failure:
                info: FailureInfo | None = to_failure_info(result.failure)
            elif code != 0:
                verdict = analyze(
                    self._rules_now(), exit_code=code, user_log=result.user_log_tail, stage="container"
                )
                info = to_failure_info(verdict)
            else:
                info = None
            why = result.runtime_exit.reason if result.runtime_exit is not None else ""
            return TaskExit(job_id, key, code, info, why, result.image_digest)
        if returncode is not None:
            code = from_returncode(returncode)
            why = f"the task process ended with {code} without writing a result"
        elif default in (STOP_EXIT_CODE, PREEMPTED_EXIT_CODE):
            return TaskExit(job_id, key, default, None, "ended before it started")
        else:
            code = default
            why = "the task process ended while the orchestrator was down, without writing a result"
        verdict = analyze(self._rules_now(), exit_code=code, platform_log=why, stage="platform")
        return TaskExit(job_id, key, code, to_failure_info(verdict), why)

    async def _guard_disk(self, disk: DiskShares) -> None:
        """Every few seconds while tasks run: a task past its share of the data dir's filesystem
        is stopped (UserContainerDiskLimitExceeded, not retried); when the filesystem's free
        space falls under the platform's reserve, the task holding the most is evicted
        (TaskEvicted, retried), as the kubelet does with ephemeral storage."""
        while self._watchers:
            await asyncio.sleep(disk.every_s)
            try:
                await self._check_disk(disk)
            except OSError as exc:
                log.warning("the tasks' disk use could not be read", error=str(exc))

    async def _check_disk(self, disk: DiskShares) -> None:
        fs = os.statvfs(self.data_dir)
        total_mb = fs.f_blocks * fs.f_frsize // 2**20
        free_mb = fs.f_bavail * fs.f_frsize // 2**20
        reserve_mb = disk.reserve_mb if disk.reserve_mb is not None else disk_reserve_mb(total_mb)
        share_mb = disk.task_mb or task_disk_mb(total_mb, reserve_mb)
        running = [k for k in self._watchers if k not in self._disk_stopped]
        # Its work dir, and what its container wrote outside it (the upper layer of its overlay).
        dirs = {k: (self.task_dir(*k) / "work", self.task_dir(*k) / UPPER) for k in running}
        used = await asyncio.to_thread(lambda: {k: [tree_bytes(d) for d in both] for k, both in dirs.items()})
        for (job_id, key), (work, container) in used.items():
            size = work + container
            if size > share_mb * 2**20:
                where = "work dir holds" if not container else "work dir and its container's own files hold"
                why = (
                    f"the task's {where} {size // 2**20} MB, past its share of {share_mb} MB "
                    "of the machine's disk (PAI_TASK_DISK_MB)"
                )
                await self._stop_for_disk(job_id, key, "WorkDirTooLarge", why)
        left = {k: sum(sizes) for k, sizes in used.items() if k not in self._disk_stopped}
        if free_mb < reserve_mb and left:
            (job_id, key), size = max(left.items(), key=lambda item: item[1])
            why = (
                f"the machine's disk had {free_mb} MB free, under the {reserve_mb} MB the platform "
                f"keeps (PAI_RESERVE_DISK_MB); the task held the most ({size // 2**20} MB) and was evicted"
            )
            await self._stop_for_disk(job_id, key, "Evicted", why)

    async def _stop_for_disk(self, job_id: str, key: TaskKey, reason: str, why: str) -> None:
        log.warning("a task is stopped for disk", job_id=job_id, key=list(key), why=why)
        self._disk_stopped[(job_id, key)] = (reason, why)
        await self.stop(job_id, key, exit_code=SIGKILLED)
        directory = self.task_dir(job_id, key)
        pid = _pid_of(directory)
        if pid is not None:  # what fills a disk is not given the grace a stop has
            asyncio.get_running_loop().call_later(DISK_GRACE_S, self._kill_if_alive, directory, pid)

    def _watch(self, job_id: str, key: TaskKey, coro: Coroutine[Any, Any, None]) -> None:
        watcher = asyncio.ensure_future(coro)
        self._watchers[(job_id, key)] = watcher
        if self.disk is not None and (self._disk_guard is None or self._disk_guard.done()):
            self._disk_guard = asyncio.create_task(self._guard_disk(self.disk))

        def forget(done: asyncio.Future[None]) -> None:
            if self._watchers.get((job_id, key)) is done:
                del self._watchers[(job_id, key)]
            self._stopping.pop((job_id, key), None)

        watcher.add_done_callback(forget)

    async def _wait_exit(
        self, job_id: str, key: TaskKey, returncode_of: Awaitable[int], directory: Path
    ) -> None:
        try:
            returncode = await returncode_of
        except ForkServerLost:
            # Its parent is gone, and with it the end's return code: the lock says when it ends.
            await self._poll_lock(job_id, key, directory)
            return
        await self.report(job_id, key, returncode=returncode)

    async def _poll_lock(self, job_id: str, key: TaskKey, directory: Path) -> None:
        # Not our child: no wait() is possible, so the lock says when it is gone.
        while lock_is_held(directory):  # noqa: ASYNC110 - no event tells us another session's process ended
            await asyncio.sleep(self._poll)
        await self.report(job_id, key)

    async def close(self) -> None:
        """Stop watching (tasks keep running; a restarted orchestrator adopts them)."""
        watchers = list(self._watchers.values())
        for watcher in watchers:
            watcher.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        if self._forks is not None:
            await self._forks.close()
        if self._bundles is not None:
            await self._bundles.close()
