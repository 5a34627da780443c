"""The CPU one task costs, from the runtime's spawn to its exit, for a one-task job running `true`.

Run: .venv/bin/python bench/runtime_cpu_bench.py [--runs 50] [--against DIR]
Each run starts the runtime as the local executor does (`runtime_command`: ``python -S -m runtime
--spec FILE``, with `task_environment` and `runtime_path()` as its environment, its own session)
on a fresh spec shaped as `build_spec` writes it (an ssh and an http port reserved; as root, the
command run as the task user ``pai-task``, as the platform's default PAI_TASK_USER=auto does), waits
for it with ``os.wait4`` and adds up the user+sys time of the runtime and everything it started
(the command included). Printed: CPU ms per task (mean and p50) and the wall time from spawn to
exit (p50), also for the runtime's own user without ports, and for a bare ``python -S -c pass``.
"""

from __future__ import annotations

import argparse
import os
import pwd
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.runtime_bench import spec  # noqa: E402  # the script beside this one
from pai.embedded.platform import free_port  # noqa: E402
from runtime.processes import runtime_command  # noqa: E402
from services.orchestrator.adapters.isolation import task_environment  # noqa: E402
from services.orchestrator.adapters.local import runtime_path  # noqa: E402


def task_user() -> dict[str, object] | None:
    """The user the platform runs tasks as by default: ``pai-task`` when it runs as root."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam("pai-task")
    except KeyError:
        entry = pwd.getpwnam("nobody")
    return {"name": entry.pw_name, "uid": entry.pw_uid, "gid": entry.pw_gid}


def two_ports() -> dict[str, list[int]]:
    ports: set[int] = set()
    while len(ports) < 2:
        ports.add(free_port("0.0.0.0"))
    return dict(zip(("ssh", "http"), ([p] for p in sorted(ports)), strict=True))


def write_spec(directory: Path, as_platform: bool) -> Path:
    """A one-task job as the orchestrator writes it (build_spec's fields, no secrets); with
    ``as_platform`` its ssh and http ports and, as root, the task user as well."""
    run_as = task_user() if as_platform else None
    work = directory / "main" / "work"
    work.mkdir(mode=0o700, parents=True)
    if run_as is not None:
        os.chown(work, int(str(run_as["uid"])), int(str(run_as["gid"])))
    ports = two_ports() if as_platform else {}
    return spec(
        directory,
        "main",
        ["main"],
        "true",
        tasks=[{"role": "main", "index": 0, "host_ip": "127.0.0.1", "ports": ports}],
        gang=True,
        run_as=run_as,
        notice="bench: runs on the host",
    )


def run_once(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, int]:
    """(CPU seconds of the process and its descendants, wall seconds, exit status)."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return usage.ru_utime + usage.ru_stime, wall, proc.returncode


class Case:
    """One way of starting a task, with the CPU and wall milliseconds of its runs."""

    def __init__(self, label: str, argv: Callable[[Path], list[str]], env: dict[str, str], platform: bool):
        self.label = label
        self.argv = argv
        self.env = env
        self.platform = platform
        self.cpu: list[float] = []
        self.wall: list[float] = []

    def run(self, directory: Path, keep: bool) -> None:
        directory.mkdir(parents=True)
        argv = self.argv(write_spec(directory, self.platform))
        cpu, wall, code = run_once(argv, directory, self.env)
        if code != 0:
            sys.exit(f"{' '.join(argv)} exited with {code}")
        if keep:
            self.cpu.append(cpu * 1000)
            self.wall.append(wall * 1000)

    def show(self) -> None:
        print(
            f"{self.label:44} CPU/task mean {statistics.mean(self.cpu):5.1f} ms"
            f"  p50 {statistics.median(self.cpu):5.1f} ms  | wall p50 {statistics.median(self.wall):5.1f} ms"
        )


def environment(root: Path) -> dict[str, str]:
    """The executor's environment for a runtime taken from ``root``."""
    paths = runtime_path().split(os.pathsep)
    return task_environment(os.environ, PYTHONPATH=os.pathsep.join([str(root.resolve()), *paths[1:]]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--no-baseline", action="store_true", help="skip `python -S -c pass`")
    parser.add_argument(
        "--against",
        type=Path,
        help="also a copy of the runtime in DIR/runtime (e.g. `git archive HEAD runtime | tar -x -C DIR`), "
        "its runs interleaved with this checkout's so both see the same load",
    )
    args = parser.parse_args()
    who = "pai-task" if task_user() else "own user"
    roots = {"": ROOT, **({" [against]": args.against} if args.against else {})}
    cases = []
    for platform, label in ((True, f"`true`, ports, {who}"), (False, "`true`, own user, no ports")):
        cases += [
            Case(label + tag, runtime_command, environment(root), platform) for tag, root in roots.items()
        ]
    if not args.no_baseline:
        bare = [sys.executable, "-S", "-c", "pass"]
        cases.append(Case("python -S -c pass", lambda _spec: bare, environment(ROOT), False))
    with tempfile.TemporaryDirectory(prefix="runtime-cpu-bench-") as tmp:
        Path(tmp).chmod(0o755)  # the task user passes through to its work dir
        for i in range(args.runs + 3):  # the first three warm the page cache
            for n, case in enumerate(cases):
                case.run(Path(tmp) / f"{n}-{i}", keep=i >= 3)
    for case in cases:
        case.show()


if __name__ == "__main__":
    main()
