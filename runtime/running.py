"""One run of a task: barrier, plugins, the user command, and the result file.

This is the runtime's sequence, in OpenPAI's order: compute the environment, wait for the gang,
prepare plugins and run their pre commands, render secrets into the user command and run it with
its output captured, run post commands if it succeeded, and always write runtime-result.json.
SIGTERM (or SIGINT) is passed on to the running command and everything it started; once it has
ended nothing else runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from runtime import barrier, exitcodes
from runtime.analysis import analyze_exit
from runtime.capturing import LogCapture
from runtime.confining import ConfineError, acting_as, confine_self
from runtime.container import (
    digest_of,
    enter_stage,
    in_userns,
    make_mount_point,
    run_name,
    script_config,
    shell_command,
    stage_binds,
    tenant_userns,
)
from runtime.environment import build_environment
from runtime.errors import PluginError
from runtime.plugins import (
    PreparedPlugin,
    applicable,
    command_script,
    plugin_name,
    prepare_plugin,
)
from runtime.ports import port_is_bindable
from runtime.reaping import become_subreaper, end_leftovers
from runtime.secrets import Masker, SecretsError, load_secrets, render_in, render_secrets
from runtime.spec import RuntimeExit, RuntimeResult, TaskSpec

TYPE_CHECKING = False  # not `typing`'s: importing it costs every task's start-up
if TYPE_CHECKING:
    from types import FrameType
    from typing import Any

RESULT_FILE = "runtime-result.json"
RUNTIME_LOG = "runtime.pai.log"
_PUMP_JOIN_S = 2.0
_RESIGNAL_S = 0.1


class _RuntimeExit(Exception):
    """The runtime ends the task itself, with one of its documented exit codes."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class _Outcome:
    def __init__(self) -> None:
        self.user_exit_code: int | None = None
        self.runtime_exit: dict[str, Any] | None = None
        self.plugins: list[dict[str, Any]] = []
        self.stopped_by: str | None = None
        self.image_digest: str | None = None


class RuntimeLog:
    """The runtime's own messages: runtime.pai.log and stderr, secrets masked."""

    def __init__(self, path: Path, masker: Masker) -> None:
        self._path = path
        self._masker = masker
        self._lock = threading.Lock()

    def __call__(self, message: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        line = self._masker.text(f"{stamp}Z [runtime] {message}\n")
        with self._lock, open(self._path, "a", encoding="utf-8") as f:
            f.write(line)
        sys.stderr.write(line)
        sys.stderr.flush()


def label_of(path: Path) -> str:
    """What a script's $0 reads: its name, as when bash ran the file itself."""
    return path.name


def _leave_groups(procs_files: list[str]) -> None:
    """In a child before exec: move this process to the task groups' parents."""
    for procs in procs_files:
        try:
            fd = os.open(procs, os.O_WRONLY)
        except OSError:
            continue
        try:
            os.write(fd, b"0")
        except OSError:
            pass
        finally:
            os.close(fd)


class TaskRun:
    def __init__(self, spec: TaskSpec) -> None:
        self.spec = spec
        self.outcome = _Outcome()
        self._child: subprocess.Popen[bytes] | None = None
        self._stop_signal: int | None = None
        self._signalled: set[tuple[int, tuple[str, ...]]] = set()
        dirs = spec.dirs
        for d in (dirs.work_dir, dirs.log_dir, dirs.barrier_dir):
            d.mkdir(parents=True, exist_ok=True)
        # The runtime's own files (the command scripts, secrets rendered in): out of the work dir,
        # which the task's user owns, so no symlink of the task's can redirect a root write.
        self._private = dirs.private_dir or dirs.log_dir.parent / "private"
        self._private.mkdir(mode=0o700, exist_ok=True)
        self.masker = Masker([])
        self.log = RuntimeLog(dirs.log_dir / RUNTIME_LOG, self.masker)
        self.capture: LogCapture | None = None
        self.env: dict[str, str] = {}
        # In a container: the names of the task's own variables (passed in), and the storages'
        # mounts (host path, mount path, read-only) the storage plugin asked for.
        self._task_vars: list[str] = []
        self._mounts: list[tuple[str, str, bool]] = []
        self._image: str | None = None  # the id of the image the runtime pulled
        self._bundle: Path | None = None  # the running script's bundle (runc), removed after it
        self._userns: int | None = None  # the tenant's user namespace (bubblewrap), made once
        self._staged: set[str] | None = None  # what is mounted on its root file system's stage

    # -- signals ---------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._stop_signal = signum
        self.outcome.stopped_by = signal.Signals(signum).name
        self._forward(signum)

    @property
    def stopping(self) -> bool:
        return self._stop_signal is not None

    def _forward(self, signum: int) -> None:
        child = self._child
        if child is None or child.returncode is not None:
            return
        # Imported only when a task is stopped: every task pays for what start-up imports.
        import psutil

        # bash defers a signal until its foreground command ends, so the whole tree gets it.
        try:
            root = psutil.Process(child.pid)
            procs = [root, *root.children(recursive=True)]
            if (self.spec.sandbox is not None and self.spec.container is None) or self._bubblewrapped():
                # bubblewrap and its init: the platform's, not the task's (see _in_sandbox).
                keep = {root.pid, *(p.pid for p in root.children())}
                procs = [p for p in procs if p.pid not in keep]
            elif self.spec.container is not None and self.spec.container.runc is not None:
                # runc passes it to the container's init, which passes it to the loader: the
                # container's processes get it once, as they do from the engine's signal proxy.
                procs = [root]
        except psutil.NoSuchProcess:
            return
        for proc in procs:
            # A child signalled between fork and exec may lose the signal: after exec its
            # command line differs, so it counts as a new process and is signalled again.
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                key = (proc.pid, tuple(proc.cmdline()))
                if key not in self._signalled:
                    self._signalled.add(key)
                    proc.send_signal(signum)

    def _wait(self, proc: subprocess.Popen[bytes]) -> int:
        """Wait for ``proc``; once stopping, also signal what it starts after the signal came.

        The wait has a timeout even before any signal: a blocking wait is resumed after the
        signal handler runs, and would never let this loop see that it is stopping. It sleeps on
        the process's pidfd, readable the moment the process ends, so it wakes 10 times a second:
        Popen.wait(timeout) polls from 0.5 ms up, some 80 wake-ups a second for the task's life.
        """
        try:
            pidfd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):  # not Linux, or before 5.3 (no pidfds): Popen's polling
            while True:
                try:
                    return proc.wait(timeout=_RESIGNAL_S)
                except subprocess.TimeoutExpired:
                    if self._stop_signal is not None:
                        self._forward(self._stop_signal)
        try:
            ended = select.poll()
            ended.register(pidfd, select.POLLIN)
            while not ended.poll(_RESIGNAL_S * 1000):
                if self._stop_signal is not None:
                    self._forward(self._stop_signal)
            return proc.wait()
        finally:
            os.close(pidfd)

    # -- steps -----------------------------------------------------------------------------

    def _run_script(self, text: str, label: str) -> int:
        assert self.capture is not None
        path = self._private / f"{label}.sh"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        script = os.open(path, os.O_RDONLY)
        try:
            if self.spec.container is not None:
                proc = self._in_container(script, label)
            elif self.spec.sandbox is not None and self.spec.run_as is not None:
                proc = self._in_sandbox(path, script)
            else:
                proc = subprocess.Popen(
                    self._command(path, script),
                    cwd=self.spec.dirs.work_dir,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    pass_fds=(script,) if self.spec.run_as else (),
                    **self._as_task_user(),
                )
            self._child = proc
            if self._stop_signal is not None:
                self._forward(self._stop_signal)
            assert proc.stdout is not None
            assert proc.stderr is not None
            pumps = [self.capture.pump(proc.stdout, False), self.capture.pump(proc.stderr, True)]
            returncode = self._wait(proc)
            # A background process may hold the pipes open; its late output is not waited for.
            for pump in pumps:
                pump.join(_PUMP_JOIN_S)
            return exitcodes.from_returncode(returncode)
        finally:
            os.close(script)
            self._child = None
            path.unlink(missing_ok=True)
            if self._bundle is not None:
                (self._bundle / "config.json").unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    self._bundle.rmdir()
                self._bundle = None

    def _in_container(self, script: int, label: str) -> subprocess.Popen[bytes]:
        """The script run in the task's image: the engine's client reads it from its stdin and
        hands it to the container's (runtime/container.py); the engine proxies a stop signal."""
        container = self.spec.container
        assert container is not None
        if container.runc is not None:
            return self._in_runc(script, label)
        if container.sandbox is not None:
            return self._in_image_sandbox(script, label)
        argv = [container.engine, *container.run]
        for name in self._task_vars:
            argv += ["--env", name]
        for source, target, read_only in self._mounts:
            argv += ["--volume", f"{source}:{target}" + (":ro" if read_only else "")]
        argv += [self._image or container.image, *shell_command(label)]
        # The client sees the task's variables (passed on by name, never by value in its
        # arguments) and what it needs itself; not the host's PATH or HOME for the container.
        env = {name: self.env[name] for name in self._task_vars}
        env.update({"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **container.env})
        confine = self.spec.confine
        groups = [str(group.parent / "cgroup.procs") for group in (confine.cgroups if confine else [])]
        return subprocess.Popen(
            argv,
            cwd=self.spec.dirs.work_dir,
            env=env,
            stdin=script,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # The engine's client and its monitor are the platform's, not the task's: out of the
            # task's groups (the container itself is nested under them, --cgroup-parent).
            preexec_fn=(lambda: _leave_groups(groups)) if groups else None,
        )

    def _in_runc(self, script: int, label: str) -> subprocess.Popen[bytes]:
        """The script in a container of its own that runc runs on the task's bundle (prepared by
        the executor: the task's overlay over the image, the engine's configuration for it). The
        container gets the script on its stdin and the task's variables by value in its
        configuration, a file of the runtime's; runc passes a stop signal to its init and deletes
        the container when it ends."""
        container = self.spec.container
        assert container is not None
        runc = container.runc
        assert runc is not None
        own = {name: self.env[name] for name in self._task_vars}
        base = json.loads(runc.config.read_bytes())
        config = script_config(base, runc.name, label, own, self._mounts)
        name = run_name(runc.name, label)
        bundle = self._private / "bundles" / name
        bundle.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(bundle / "config.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(config))  # the C encoder: json.dump's is Python's, 5x slower
        self._bundle = bundle
        confine = self.spec.confine
        groups = [str(group.parent / "cgroup.procs") for group in (confine.cgroups if confine else [])]
        return subprocess.Popen(
            [runc.program, "--root", str(runc.root), "run", "--bundle", str(bundle), name],
            cwd=bundle,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            stdin=script,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # runc waits for its container: the platform's, out of the task's groups (the
            # container's own group is nested under the task's, its cgroupsPath).
            preexec_fn=(lambda: _leave_groups(groups)) if groups else None,
            # The mount points runc makes in the task's root filesystem (/run, the work dir's
            # path) must be open to the task's user, whatever the platform's own umask.
            umask=0o022,
        )

    def _bubblewrapped(self) -> bool:
        container = self.spec.container
        return container is not None and container.sandbox is not None

    def _in_image_sandbox(self, script: int, label: str) -> subprocess.Popen[bytes]:
        """The script in the task's image, run by bubblewrap in a user namespace of the tenant's
        uid over the task's root file system (the executor's bundle said in bubblewrap's words,
        services/orchestrator/core/image_sandboxes.py), the storages bound at their mount paths,
        the engine's seccomp filter loaded last. The script comes on stdin, the task's variables
        by value in the environment (bubblewrap passes it on; the arguments hold none).

        bubblewrap is the platform's, as for a host task (``_in_sandbox``): in a process group
        of its own, a stop reaches the commands through ``_forward``. It runs in the task's
        cgroups, so the task's limits hold for everything in the container."""
        container = self.spec.container
        assert container is not None
        sandbox = container.sandbox
        assert sandbox is not None
        # The root file system and its binds staged once, in the runtime's own mount namespace
        # (every script's bubblewrap starts from it); a storage's the first time a script has it.
        binds: list[tuple[str, str, bool]] = []
        try:
            if self._staged is None:
                enter_stage(str(sandbox.rootfs), sandbox.stage)
                self._staged = set()
                binds += [(b.source, b.target, b.read_only) for b in sandbox.binds]
            for source, target, read_only in self._mounts:
                if target not in self._staged:
                    make_mount_point(sandbox.rootfs, target, directory=os.path.isdir(source))
                    binds.append((source, target, read_only))
            stage_binds(sandbox.stage, binds)
        except OSError as exc:  # the container did not run: as limits that could not be set
            raise _RuntimeExit(
                exitcodes.CONFINE_FAILED, f"the task's container could not be set up: {exc}"
            ) from exc
        self._staged.update(target for _, target, _ in binds)
        argv = list(sandbox.argv)
        fds: list[int] = []
        run_as = self.spec.run_as
        if self._userns is None and run_as is not None:
            try:
                self._userns = tenant_userns(run_as.uid, run_as.gid, list(run_as.groups))
            except OSError as exc:  # bubblewrap's own then: the storages' gids show as nobody's
                self._userns = -1
                self.log(f"the container's user namespace maps the task's uid and gid only: {exc}")
        if self._userns is not None and self._userns >= 0:
            fds.append(os.dup(self._userns))  # a copy: those passed are closed once it started
            argv = in_userns(argv, fds[-1])
        if sandbox.seccomp is not None:
            fds.append(os.open(sandbox.seccomp, os.O_RDONLY | os.O_CLOEXEC))
            argv += ["--seccomp", str(fds[-1])]
        own = {name: self.env[name] for name in self._task_vars}
        env = dict(entry.partition("=")[::2] for entry in sandbox.env)
        env.update(own)
        try:
            return subprocess.Popen(
                [*argv, "--", *sandbox.entry, *shell_command(label)],
                cwd="/",
                env=env,
                stdin=script,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=fds,
                process_group=0,
                umask=0o022,
            )
        finally:
            for fd in fds:
                os.close(fd)

    def _in_sandbox(self, path: Path, script: int) -> subprocess.Popen[bytes]:
        """The script on the host in the task's sandbox (services/orchestrator/core/sandboxes.py):
        bubblewrap with the storages at their mount paths, then setpriv to the task's user.

        bubblewrap is the platform's: in a process group of its own, so a stop sent to the
        runtime's group reaches the task's commands through ``_forward`` (which passes over
        bubblewrap's two processes), never bubblewrap itself, whose end would kill the commands
        at once (``--die-with-parent``)."""
        sandbox = self.spec.sandbox
        assert sandbox is not None
        binds: list[str] = []
        for source, target, read_only in self._mounts:
            binds += ["--ro-bind" if read_only else "--bind", source, target]
        argv = [
            *sandbox.wrap,
            *binds,
            "--chdir",
            str(self.spec.dirs.work_dir),
            "--",
            *sandbox.drop,
            *self._command(path, script),
        ]
        return subprocess.Popen(
            argv,
            cwd=self.spec.dirs.work_dir,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(script,),
            process_group=0,
            umask=0o022,
        )

    def _pull(self) -> None:
        """The task's image, pulled now (it was not on the node): the task's log says so, a stop
        ends the pull, and an image that cannot be pulled ends the task with 254. The image then
        runs by the id the pull gave, its digest recorded in the result."""
        container = self.spec.container
        assert container is not None
        reference = container.image
        self.log(f"pulling the docker image {reference}")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **container.env}
        args = [container.engine, "pull", "--quiet"]
        auth = container.auth_file
        if auth is not None:
            if "docker" in Path(container.engine).name:
                env["DOCKER_CONFIG"] = str(auth.parent)
            else:
                args += ["--authfile", str(auth)]
        try:
            proc = subprocess.Popen(
                [*args, reference],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            self._child = proc
            code = self._wait(proc)
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            if proc.stderr:
                proc.stderr.close()
        finally:
            self._child = None
            if auth is not None:
                auth.unlink(missing_ok=True)
        if self.stopping:
            raise _RuntimeExit(exitcodes.TERMINATED, f"stopped while pulling the image {reference}")
        if code != 0:
            last = (err.strip().splitlines() or ["no message"])[-1]
            raise _RuntimeExit(
                exitcodes.IMAGE_NOT_EXISTS, f"the image {reference} could not be pulled: {last[-300:]}"
            )
        found = subprocess.run(
            [container.engine, "image", "inspect", "--format", "{{.Id}} {{json .RepoDigests}}", reference],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        ident, _, listed = found.stdout.strip().partition(" ")
        if found.returncode != 0 or not ident:
            raise _RuntimeExit(
                exitcodes.IMAGE_NOT_EXISTS, f"the image {reference} was pulled but cannot be found"
            )
        try:
            digests = [str(d) for d in json.loads(listed or "[]") or []]
        except ValueError:
            digests = []
        digest = digest_of(digests, reference)
        self._image = ident
        self.outcome.image_digest = digest
        self.log(f"pulled the docker image {reference}: {digest or ident}")

    def _check_container_started(self, code: int) -> None:
        """The engine's words, not the user's command: the container never ran its shell (the
        image has no /bin/sh, or it may not be executed). Podman's init says "failed to exec
        pid1" (exit 1); an engine without one has its OCI runtime say it (126, 127), runc run
        directly "unable to start container process"."""
        assert self.capture is not None
        assert self.spec.container is not None
        tail = self.capture.tail.text()
        image = self.spec.container.digest or self.spec.container.image
        said = (
            "failed to exec pid1",
            "OCI runtime",
            "OCI permission denied",
            "unable to start container process",
            "bwrap: execvp",
        )
        not_run = any(words in tail for words in said)
        if not not_run:
            return
        if "permission denied" in tail.lower():
            raise _RuntimeExit(
                exitcodes.START_PERMISSION_DENIED, f"the image {image}'s /bin/sh may not be run"
            )
        raise _RuntimeExit(exitcodes.START_NOT_FOUND, f"the image {image} has no /bin/sh to run the commands")

    def _command(self, path: Path, script: int) -> list[str]:
        if self.spec.run_as is None:
            return ["/bin/bash", str(path)]
        # The script (secrets rendered in) stays the runtime's file: the task's user reads it
        # through the descriptor it inherits, closed before the commands run, so no file or
        # process of that user (another job's task included) ever holds it. bash's read builtin
        # takes it whole (no NUL delimiter in a script) without the subshell and `cat` a
        # `$(cat <&N)` forks, and the variable is unset before the first command runs.
        return [
            "/bin/bash",
            "-c",
            f"IFS= read -r -d '' _pai_script <&{script}; exec {script}<&-; "
            'eval "unset -v _pai_script; $_pai_script"',
            label_of(path),
        ]

    def _as_task_user(self) -> dict[str, Any]:
        run_as = self.spec.run_as
        if run_as is None:
            return {}
        # Its team storages' groups beside its own (services/orchestrator/core/storage_groups.py).
        return {"user": run_as.uid, "group": run_as.gid, "extra_groups": list(run_as.groups), "umask": 0o022}

    def _check_ports(self) -> None:
        taken = [p for ports in self.spec.me.ports.values() for p in ports if not port_is_bindable(p)]
        if taken:
            raise _RuntimeExit(exitcodes.PORT_CONFLICT, f"ports {taken} reserved for this task are in use")

    def _barrier(self) -> None:
        spec = self.spec
        barrier.announce(spec.dirs.barrier_dir, spec.me)
        expected = [(t.role, t.index) for t in spec.tasks]
        self.log(f"ready; waiting up to {spec.barrier_timeout_s:g}s for {len(expected)} tasks")
        missing = barrier.wait_for_peers(
            spec.dirs.barrier_dir, expected, spec.barrier_timeout_s, lambda: self.stopping
        )
        if self.stopping:
            raise _RuntimeExit(exitcodes.TERMINATED, "stopped while waiting for the gang barrier")
        if missing:
            raise _RuntimeExit(
                exitcodes.BARRIER_TIMEOUT,
                f"gang barrier timed out after {spec.barrier_timeout_s:g}s; tasks not ready: {missing}",
            )
        self.log(f"barrier passed: {len(expected)} tasks ready")

    def _plugin_failed(self, prepared: PreparedPlugin | None, name: str, policy: str, reason: str) -> None:
        entry = {"plugin": name, "status": "ignored" if policy == "ignore" else "failed", "reason": reason}
        if prepared is not None:
            entry.update(prepared.report)
        self.outcome.plugins.append(entry)
        self.log(f"plugin {name} failed: {reason}" + (" (ignored)" if policy == "ignore" else ""))
        if policy == "fail":
            raise _RuntimeExit(exitcodes.PLUGIN_FAILED, f"plugin {name} failed: {reason}")

    def _prepare_plugins(self, secrets: dict[str, str]) -> list[PreparedPlugin]:
        prepared: list[PreparedPlugin] = []
        for plugin in applicable(self.spec):
            name = plugin_name(plugin)
            try:
                rendered = plugin.replace(parameters=render_in(plugin.parameters, secrets))
            except SecretsError as exc:
                raise _RuntimeExit(exitcodes.SECRET_MISSING, f"plugin {name}: {exc}") from exc
            try:
                one = prepare_plugin(rendered, self.spec, self.env, self.log)
            except (PluginError, OSError, subprocess.CalledProcessError) as exc:
                self._plugin_failed(None, name, plugin.failure_policy, str(exc))
                continue
            prepared.append(one)
            self.outcome.plugins.append({"plugin": name, "status": "ok", **one.report})
            in_view = self.spec.container is not None or self.spec.sandbox is not None
            if in_view and name in ("storage", "teamwise_storage"):
                from runtime.storage import requested_storages

                self._mounts += [
                    (storage.path, mount, storage.read_only)
                    for storage, mount in requested_storages(rendered.parameters, self.spec.storages)
                ]
        return prepared

    def _run_commands(self, plugins: list[PreparedPlugin], post: bool) -> None:
        for one in plugins:
            commands = one.post_commands if post else one.pre_commands
            if not commands or self.stopping:
                continue
            stage = "post" if post else "pre"
            policy = one.spec.failure_policy
            code = self._run_script(command_script(commands, policy), f"{one.name}-{stage}")
            if code != 0 and policy == "fail" and not self.stopping:
                self._plugin_failed(one, one.name, policy, f"{stage} commands exited with {code}")

    def execute(self) -> int:
        """Run the task; returns the runtime's exit code."""
        spec = self.spec
        try:
            try:
                # First of all: nothing of the task runs outside its limits.
                confine_self(spec.confine)
            except ConfineError as exc:
                raise _RuntimeExit(exitcodes.CONFINE_FAILED, str(exc)) from exc
            try:
                secrets = load_secrets(spec.secrets_file)
            except SecretsError as exc:
                raise _RuntimeExit(exitcodes.SPEC_INVALID, str(exc)) from exc
            self.masker = Masker(secrets.values())
            self.log = RuntimeLog(spec.dirs.log_dir / RUNTIME_LOG, self.masker)
            rotation = spec.log_rotation
            self.capture = LogCapture(
                spec.dirs.log_dir,
                rotation.max_bytes,
                rotation.backup_count,
                self.masker,
                spec.result_tail_kib * 1024,
            )
            # A home of its own: the host's is not the task's (and not writable by its user).
            who = {"USER": spec.run_as.name, "LOGNAME": spec.run_as.name} if spec.run_as else {}
            self.env = {"HOME": str(spec.dirs.work_dir), **os.environ, **who, **build_environment(spec)}
            if spec.run_as is not None:
                # A temporary folder of the task's own: /tmp is every tenant's, and what a
                # program leaves there readable by all would be another tenant's to read.
                with acting_as(spec.run_as, spec.dirs.work_dir):
                    os.makedirs(".tmp", mode=0o700, exist_ok=True)
                self.env["TMPDIR"] = str(spec.dirs.work_dir / ".tmp")
            if spec.container is not None:
                # The container has its image's own PATH and the rest of its environment; of the
                # host's it gets only what is the task's.
                own = {"HOME": str(spec.dirs.work_dir), **who, **build_environment(spec)}
                if "TMPDIR" in self.env:
                    own["TMPDIR"] = self.env["TMPDIR"]
                self._task_vars = sorted(own)
            if spec.notice:
                self.capture.note(spec.notice)
            self.log(
                f"task {spec.role}-{spec.index} of job {spec.job.framework_name}"
                f" attempt {spec.job.attempt_id}"
            )
            if spec.container is not None and spec.container.pull:
                self._pull()
            self._check_ports()
            if spec.gang:
                self._barrier()
            plugins = self._prepare_plugins(secrets)
            try:
                command = render_secrets(spec.entrypoint, secrets)
            except SecretsError as exc:
                raise _RuntimeExit(exitcodes.SECRET_MISSING, str(exc)) from exc
            self._run_commands(plugins, post=False)
            if self.stopping:
                raise _RuntimeExit(exitcodes.TERMINATED, "stopped before the user command started")
            self.log("user command starts")
            code = self._run_script(command, "user-command")
            if spec.container is not None and code in (1, 126, 127):
                self._check_container_started(code)
            self.outcome.user_exit_code = code
            self.log(f"user command exited with {code}")
            if code == 0 and not self.stopping:
                self._run_commands(list(reversed(plugins)), post=True)
            return code
        except _RuntimeExit as exc:
            self.outcome.runtime_exit = {
                "code": exc.code,
                "phrase": exitcodes.PHRASES.get(exc.code, "RuntimeTerminated"),
                "reason": exc.reason,
            }
            self.log(exc.reason)
            return exc.code

    def write_result(self, exit_code: int) -> RuntimeResult:
        tail = self.capture.tail.text() if self.capture else ""
        ended = self.outcome.runtime_exit
        result = RuntimeResult(
            exit_code=exit_code,
            user_exit_code=self.outcome.user_exit_code,
            runtime_exit=RuntimeExit(**ended) if ended else None,
            stopped_by=self.outcome.stopped_by,
            plugins=self.outcome.plugins,
            user_log_tail=tail,
            image_digest=self.outcome.image_digest,
            failure=analyze_exit(
                exit_code,
                tail,
                self.spec.failure_rules_file,
                runtime_reason=ended["reason"] if ended else None,
            ),
        )
        text = self.masker.text(json.dumps(result.to_json(), indent=2))
        path = self.spec.dirs.log_dir / RESULT_FILE
        tmp = path.with_name(f".{RESULT_FILE}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
        if self.capture:
            self.capture.close()
        return result


def run_task(spec: TaskSpec) -> int:
    """Run the task described by ``spec`` in this process; returns the exit code to exit with."""
    try:
        run = TaskRun(spec)
    except OSError as exc:
        # Without its directories the runtime has nowhere to write a result.
        print(f"[runtime] cannot prepare the task's directories: {exc}", file=sys.stderr)
        return exitcodes.INTERNAL_ERROR
    run.install_signal_handlers()
    if spec.container is None:
        # A host task's processes stay in this runtime's tree, to be ended with it; in a
        # container the engine's own processes (conmon) must not be adopted.
        become_subreaper()
    try:
        code = run.execute()
    except Exception as exc:
        run.outcome.runtime_exit = {
            "code": exitcodes.INTERNAL_ERROR,
            "phrase": exitcodes.PHRASES[exitcodes.INTERNAL_ERROR],
            "reason": f"runtime error: {type(exc).__name__}: {exc}",
        }
        run.log(f"runtime error: {type(exc).__name__}: {exc}")
        code = exitcodes.INTERNAL_ERROR
    if spec.container is None:
        ended = end_leftovers()
        if ended:
            run.log(f"the task's command left {ended} process(es) running: ended with it")
    run.write_result(code)
    return code
