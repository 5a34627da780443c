"""Entering a running task: what `pai job exec` runs on the node, as the task's own commands run.

The orchestrator starts ``python -S -m runtime.entering --spec FILE [--tty] -- COMMAND...`` for
each exec, as the platform's user (root on a root platform), in a session of its own, with the
exec's terminal or pipes as its standard streams. Like the runtime, it reads the task's spec and
nothing else; then, in this order, it

- joins the task's cgroups and takes its rlimits (``confine_self``, as the runtime does first), so
  the exec counts against the task's limits and cannot leave them;
- computes the task's environment as the runtime did: HOME (the work dir), USER and LOGNAME,
  TMPDIR, every PAI_* variable (``build_environment``), from the same inherited variables;
- with a terminal, makes it its controlling terminal and gives it to the task's user;
- becomes what runs the task's commands (``plan_entry`` decides which):

  - a sandboxed host task: ``nsenter`` into the PID, mount and IPC namespaces of the sandbox the
    runtime runs a command in now (found from the runtime's pid file), ``env --chdir`` to the work
    dir there, then the spec's own setpriv drop to the tenant (no capability, ``no_new_privs``);
  - a host task without a sandbox: the task's uid and gid with no supplementary group, as the
    runtime starts the commands (or, without a task user, the platform's own);
  - a task in its image: the engine's exec into the task's container (``podman exec --user
    UID:GID --workdir WORK NAME``), the task's variables passed by name, never in an argument.
    The engine puts the process in the container's cgroup, under the task's own. Where runc runs
    the containers, ``runc exec`` into the running script's;
  - a task in its image that bubblewrap runs: ``nsenter`` into the user, PID, mount, IPC and UTS
    namespaces of the running script's sandbox, its root and work dir, as the tenant's uid and
    gid under ``no_new_privs``. With a terminal, the command gets one of the container's own
    (its /dev/pts), which this process passes the exec's terminal through, as an engine's exec
    does: the exec's terminal is not a device the container can name.

A refusal (no sandbox running now, a container engine it cannot exec with) is one line on
stderr and exit code 125, as a container engine's exec says its own failures.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from runtime.confining import ConfineError, confine_self
from runtime.environment import build_environment
from runtime.spec import ImageSandbox, SpecError, TaskSpec, load_spec

TYPE_CHECKING = False  # not `typing`'s: importing it costs every exec's start-up
if TYPE_CHECKING:
    from collections.abc import Mapping

PID_FILE = "pid"
"""Beside the spec, the task's runtime's pid (services/orchestrator/adapters/specs.py)."""
REFUSED = 125
USAGE = "usage: python -m runtime.entering --spec SPEC [--tty] -- COMMAND [ARG...]\n"


class EntryError(Exception):
    """The task cannot be entered now; the message says why."""


class Entry:
    """How one exec enters its task: the program and arguments, environment and directory, who it
    runs as where no program drops to the task's user, and whether it joins the task's limits."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        *,
        drop_to: tuple[int, int] | None = None,
        groups: tuple[int, ...] = (),
        confine: bool = True,
        seccomp: str | None = None,
    ) -> None:
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.drop_to = drop_to
        self.groups = groups  # the task's team storages' gids, kept when dropping to its user
        self.confine = confine
        self.seccomp = seccomp  # a compiled filter (BPF) this process loads last, before its exec


def task_environment(spec: TaskSpec, inherited: Mapping[str, str]) -> dict[str, str]:
    """The task's own variables: what the runtime adds to what it inherited (runtime/running.py
    ``TaskRun.execute``)."""
    work = str(spec.dirs.work_dir)
    who = {"USER": spec.run_as.name, "LOGNAME": spec.run_as.name} if spec.run_as else {}
    own = {"HOME": work, **who, **build_environment(spec)}
    if spec.run_as is not None:
        own["TMPDIR"] = str(spec.dirs.work_dir / ".tmp")
    return own


def _option(run: list[str], name: str) -> str | None:
    """The value of ``name`` in an engine's run arguments (``--name NAME``)."""
    try:
        return run[run.index(name) + 1]
    except (ValueError, IndexError):
        return None


def plan_entry(
    spec: TaskSpec,
    command: list[str],
    *,
    tty: bool,
    inherited: Mapping[str, str],
    target: int | None = None,
    nsenter: str = "nsenter",
    chdir: str = "env",
    setsid: str = "setsid",
    target_container: str | None = None,
) -> Entry:
    """How to run ``command`` inside the task ``spec`` describes (pure: ``target`` is a process in
    the sandbox a sandboxed host task runs its command in now, ``target_container`` the container
    runc runs a script of the task in now). EntryError when it cannot be."""
    if not command:
        raise EntryError("no command to run")
    work = str(spec.dirs.work_dir)
    own = task_environment(spec, inherited)
    if tty:
        own.setdefault("TERM", inherited.get("TERM") or "xterm")
    container = spec.container
    if container is not None:
        runc = getattr(container, "runc", None)
        if runc is not None:
            # Run by runc itself, a container per script (runtime/running.py): runc's exec into
            # the one running now takes its process as it is (the tenant, no capability,
            # no_new_privs, the task's variables) but for the command, the terminal and the dir.
            if target_container is None:
                raise EntryError(
                    "the task runs no command now (it waits at its gang barrier, or between its "
                    "plugins' commands and its own); try again in a moment"
                )
            argv = [runc.program, "--root", str(runc.root), "exec", *(["--tty"] if tty else [])]
            argv += ["--cwd", work, *(["--env", f"TERM={own['TERM']}"] if tty else [])]
            env = {"PATH": inherited.get("PATH", "/usr/bin:/bin")}
            return Entry([*argv, target_container, *command], env, work, confine=False)
        sandbox = getattr(container, "sandbox", None)
        if sandbox is not None:
            drop = sandbox.argv[: sandbox.argv.index("--") + 1]
            return _into_image_sandbox(spec, drop, sandbox, command, own, target, nsenter, inherited)
        engine = Path(container.engine).name
        name = _option(container.run, "--name")
        if engine not in ("podman", "docker") or name is None:
            raise EntryError(f"a command cannot be run in this task's container (engine {engine})")
        argv = [container.engine, "exec", "-i", *(["-t"] if tty else [])]
        user = _option(container.run, "--user")
        argv += [*(["--user", user] if user else []), "--workdir", work]
        for variable in sorted(own):
            argv += ["--env", variable]  # by name: the value is the engine client's own
        argv += [name, *command]
        env = {**own, "PATH": inherited.get("PATH", "/usr/bin:/bin"), **container.env}
        # The engine's client is the platform's: out of the task's groups, as the runtime keeps it.
        return Entry(argv, env, work, confine=False)
    env = {"HOME": work, **inherited, **own}
    if spec.sandbox is not None and spec.run_as is not None:
        if target is None:
            raise EntryError(
                "the task runs no command now (it waits at its gang barrier, or between its plugins' "
                "commands and its own); try again in a moment"
            )
        # The work dir is entered inside the sandbox's mount namespace (env --chdir, as root, before
        # the drop): nsenter's own --wd opens it outside, where the sandbox's root cannot reach it.
        argv = [nsenter, f"--target={target}", "--pid", "--mount", "--ipc", "--", chdir, f"--chdir={work}"]
        if tty:
            # A session and a terminal of its own inside the namespace: a shell's job control
            # names process groups there, and the platform's outside are not in its sight.
            argv += [setsid, "--ctty"]
        return Entry([*argv, *spec.sandbox.drop, *command], env, work)
    drop_to = (spec.run_as.uid, spec.run_as.gid) if spec.run_as is not None else None
    groups = tuple(spec.run_as.groups) if spec.run_as is not None else ()
    return Entry(list(command), env, work, drop_to=drop_to, groups=groups)


def _into_image_sandbox(
    spec: TaskSpec,
    drop: list[str],
    sandbox: ImageSandbox,
    command: list[str],
    own: dict[str, str],
    target: int | None,
    nsenter: str,
    inherited: Mapping[str, str],
) -> Entry:
    """Into the container bubblewrap runs a script of the task in now (its init is ``target``):
    ``drop`` (the task's setpriv: the tenant's uid, gid and groups, no capability, no_new_privs),
    then nsenter into its user namespace (the tenant's own, so the tenant may enter it), its PID,
    mount, IPC and UTS namespaces, its root and working directory (the work dir), keeping the
    tenant's credentials. The engine's seccomp filter is loaded before all that, with the two
    calls nsenter needs besides (setns and chroot: seccomp_filters.ENTRY_CALLS), so the command
    runs under it as the task's own commands do."""
    if target is None:
        raise EntryError(
            "the task runs no command now (it waits at its gang barrier, or between its plugins' "
            "commands and its own); try again in a moment"
        )
    if spec.run_as is None:
        raise EntryError("the task's container runs as no tenant: a command cannot be run in it")
    argv = [*drop, nsenter, f"--target={target}", "--user", "--pid", "--mount", "--ipc", "--uts"]
    argv += ["--preserve-credentials", "--root", "--wd"]
    env = dict(entry.partition("=")[::2] for entry in sandbox.env)
    env.update(own)
    env["PATH"] = env.get("PATH") or inherited.get("PATH", "/usr/bin:/bin")
    seccomp = str(sandbox.entry_seccomp) if sandbox.entry_seccomp is not None else None
    return Entry([*argv, "--", *command], env, str(spec.dirs.work_dir), seccomp=seccomp)


_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2


def load_filter(path: str) -> None:
    """The compiled seccomp filter (BPF) at ``path`` on this thread, after no_new_privs: it holds
    for every program this process execs and their children. EntryError where it cannot be."""
    import ctypes

    try:
        with open(path, "rb") as f:
            program = f.read()
    except OSError as exc:
        raise EntryError(f"the container's seccomp filter cannot be read: {exc}") from None
    if not program or len(program) % 8:
        raise EntryError(f"the container's seccomp filter {path} is not a BPF program")

    class _Program(ctypes.Structure):
        _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))

    code = ctypes.create_string_buffer(program, len(program))
    fprog = _Program(len(program) // 8, ctypes.addressof(code))
    libc = ctypes.CDLL(None, use_errno=True)  # the process's own: a handle, not a load
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or (
        libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0
    ):
        raise EntryError(f"the container's seccomp filter was refused: {os.strerror(ctypes.get_errno())}")


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def sandbox_process(runtime_pid: int) -> int | None:
    """The first process below the runtime in a PID namespace other than the runtime's: the init
    of the sandbox the runtime runs a command in now (bubblewrap's, pid 1 inside); None between
    commands."""
    own = _pid_namespace(runtime_pid)
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name is in parentheses and may hold anything; the fields after it do not.
        fields = stat[stat.rfind(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    queue = sorted(children.get(runtime_pid, []))
    while queue:
        pid = queue.pop(0)
        namespace = _pid_namespace(pid)
        if namespace is not None and namespace != own:
            return pid
        queue += sorted(children.get(pid, []))
    return None


def runc_container(root: Path, name: str) -> str | None:
    """The container runc runs one of the task's scripts in now: its id begins with the task's
    name (runtime/container.py ``run_prefix``); None between scripts."""
    import importlib  # only with runc, whose runner names the containers (runtime/container.py)

    prefix = str(importlib.import_module("runtime.container").run_prefix(name))
    try:
        found = sorted(entry.name for entry in os.scandir(root) if entry.name.startswith(prefix))
    except OSError:
        return None
    return found[-1] if found else None


def _which(program: str, path: str) -> str:
    for folder in path.split(os.pathsep):
        candidate = os.path.join(folder, program)
        if os.access(candidate, os.X_OK):
            return candidate
    return program


def _take_terminal(owner: tuple[int, int] | None) -> None:
    """Standard input's terminal as this session's controlling terminal, given to ``owner``."""
    import fcntl
    import termios

    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    if owner is not None and os.geteuid() == 0:
        os.fchown(0, owner[0], -1)  # as login does: programs may open their terminal by its name
        os.fchmod(0, 0o620)


_TIOCSPTLCK = 0x40045431
_TIOCGPTPEER = 0x5441


def _through_container_terminal(entry: Entry, target: int, owner: tuple[int, int] | None) -> int:
    """``entry`` run on a terminal of the container's own devpts (the one ``target`` sees), this
    process passing bytes between it and its standard streams (in raw mode: the line discipline
    is the container's terminal's) and the window's size along; the command's exit code."""
    import contextlib
    import fcntl
    import select
    import signal
    import termios
    import tty

    master = os.open(f"/proc/{target}/root/dev/pts/ptmx", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    fcntl.ioctl(master, _TIOCSPTLCK, b"\0\0\0\0")
    peer = fcntl.ioctl(master, _TIOCGPTPEER, os.O_RDWR | os.O_NOCTTY)
    if owner is not None:
        os.fchown(peer, owner[0], owner[1])

    def size(*_: object) -> None:
        with contextlib.suppress(OSError):  # no window to take the size of (not a terminal)
            fcntl.ioctl(master, termios.TIOCSWINSZ, fcntl.ioctl(0, termios.TIOCGWINSZ, b"\0" * 8))

    size()
    pid = os.fork()
    if pid == 0:  # the command: a session of its own on the container's terminal
        try:
            os.setsid()
            fcntl.ioctl(peer, termios.TIOCSCTTY, 0)
            for fd in (0, 1, 2):
                os.dup2(peer, fd)
            os.close(peer)
            os.umask(0o022)
            if entry.seccomp is not None:
                load_filter(entry.seccomp)
            os.execvpe(entry.argv[0], entry.argv, entry.env)
        except EntryError as exc:
            os.write(2, f"pai exec: {exc}\r\n".encode())
            os._exit(REFUSED)
        finally:
            os._exit(127)
    os.close(peer)
    signal.signal(signal.SIGWINCH, size)
    saved = termios.tcgetattr(0) if os.isatty(0) else None
    if saved is not None:
        tty.setraw(0)
    try:
        streams = [0, master]
        while True:
            try:
                ready, _, _ = select.select(streams, [], [])
            except InterruptedError:
                continue
            if master in ready:
                try:
                    data = os.read(master, 65536)
                except OSError:
                    data = b""  # EIO: the command and everything on its terminal ended
                if not data:
                    break
                os.write(1, data)
            if 0 in ready:
                data = os.read(0, 65536)
                if data:
                    os.write(master, data)
                else:
                    streams.remove(0)
    finally:
        if saved is not None:
            termios.tcsetattr(0, termios.TCSADRAIN, saved)
        os.close(master)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def enter(spec: TaskSpec, directory: Path, command: list[str], tty: bool) -> None:
    """Become ``command`` inside the task (never returns); EntryError when it cannot."""
    inherited = dict(os.environ)
    target = None
    sandboxed = spec.container is None and spec.sandbox is not None
    if (sandboxed or getattr(spec.container, "sandbox", None) is not None) and spec.run_as is not None:
        try:
            runtime_pid = int((directory / PID_FILE).read_text().strip())
        except (OSError, ValueError) as exc:
            raise EntryError(f"the task's runtime is not on record: {exc}") from None
        target = sandbox_process(runtime_pid)
    runc = getattr(spec.container, "runc", None)
    running = runc_container(runc.root, runc.name) if runc is not None else None
    path = inherited.get("PATH", "/usr/bin:/bin")
    entry = plan_entry(
        spec,
        command,
        tty=tty,
        inherited=inherited,
        target=target,
        nsenter=_which("nsenter", path),
        chdir=_which("env", path),
        setsid=_which("setsid", path),
        target_container=running,
    )
    if entry.confine:
        try:
            confine_self(spec.confine)
        except ConfineError as exc:
            raise EntryError(str(exc)) from None
    own_terminal = spec.container is None or getattr(spec.container, "sandbox", None) is not None
    owner = (spec.run_as.uid, spec.run_as.gid) if spec.run_as is not None and own_terminal else None
    if tty and getattr(spec.container, "sandbox", None) is not None and target is not None:
        os.chdir(entry.cwd)
        sys.exit(_through_container_terminal(entry, target, owner))
    if tty:
        _take_terminal(owner)
    os.chdir(entry.cwd)
    if entry.drop_to is not None and os.geteuid() == 0:
        uid, gid = entry.drop_to
        os.setgroups(list(entry.groups))
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    os.umask(0o022)
    if entry.seccomp is not None:
        load_filter(entry.seccomp)  # last: from here on the calls the container's profile allows
    try:
        os.execvpe(entry.argv[0], entry.argv, entry.env)
    except FileNotFoundError:
        print(f"pai exec: {entry.argv[0]}: command not found", file=sys.stderr)
        os._exit(127)
    except PermissionError:
        print(f"pai exec: {entry.argv[0]}: permission denied", file=sys.stderr)
        os._exit(126)


def main(argv: list[str]) -> int:
    if "--" not in argv:
        sys.stderr.write(USAGE)
        return 2
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
    tty = "--tty" in options
    options = [o for o in options if o != "--tty"]
    if len(options) != 2 or options[0] != "--spec" or not command:
        sys.stderr.write(USAGE)
        return 2
    path = Path(options[1])
    try:
        spec = load_spec(path)
        enter(spec, path.parent, command, tty)
    except (SpecError, EntryError) as exc:
        print(f"pai exec: {exc}", file=sys.stderr)
    return REFUSED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
