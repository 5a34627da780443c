"""The `pai` command's own cost: wall time of `pai --help` and `pai job list`, and what it imports.

Every `pai` call is a new interpreter, so what `import pai.cli.main` loads is paid by each one.
This runs `pai --help` N times, starts the whole platform (`pai up` in a temporary data dir, on
free ports), logs in and submits a few jobs, then runs `pai job list` N times against it: p50,
p90 and the CPU (user + system) of each call. After each command, where its imports went
(`-X importtime` self time summed per top-level package); last, `python -X importtime -c
"import pai.cli.main"`: the heaviest imports by cumulative time, and how many service,
SQLAlchemy or Kubernetes modules the CLI loaded (none is the target). Target: `pai --help` and
`pai job list` at most 300 ms wall p50 on the project's 2-core machine.

With --root DIR the timed calls run the CLI of DIR instead (an export of another commit,
`git archive REV pai libs services runtime | tar -x -C DIR`), as `python -c` with DIR first on the
path and the editable install's finder set aside, beside the same platform: a before and an
after measured under the same load.

Command: .venv/bin/python -m bench.cli_bench [--runs N] [--jobs J] [--top T] [--no-platform] [--root DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_P50_MS = 300.0
ADMIN_PASSWORD = "bench-admin-pass"
# Module families the command line should never load for itself.
HEAVY = ("services", "sqlalchemy", "kubernetes")
JOB = """protocolVersion: 2
name: {name}
type: job
prerequisites:
  - {{name: image, type: dockerimage, uri: python:3.11-slim}}
taskRoles:
  main:
    dockerImage: image
    resourcePerInstance: {{cpu: 1, memoryMB: 64, gpu: 0}}
    commands:
      - "true"
"""


MAIN = "from pai.cli.main import main; main()"


def pai_command() -> list[str]:
    """The installed `pai` script beside this interpreter, as a user runs it; else the module."""
    script = Path(sys.executable).with_name("pai")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", MAIN]


def main_code(root: Path | None, then: str = MAIN) -> str:
    """`python -c` code running ``then`` on this checkout, or on the export at ``root``: the
    editable install's finder would import this checkout's packages whatever the path says."""
    if root is None:
        return then
    return (
        "import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in type(f).__module__]; "
        f"sys.path.insert(0, {str(root)!r}); {then}"
    )


def timed_cli(root: Path | None) -> list[str]:
    """The command the timed calls run: this checkout's `pai`, or the CLI of the export."""
    return pai_command() if root is None else [sys.executable, "-c", main_code(root)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def timed(argv: list[str], env: dict[str, str], runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU milliseconds of each of ``runs`` calls; a failing call stops the benchmark."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, stdin=subprocess.DEVNULL, check=False)
        walls.append((time.perf_counter() - started) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)
        if done.returncode:
            raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr.decode()}")
    return walls, cpus


def report(what: str, walls: list[float], cpus: list[float]) -> None:
    ordered = sorted(walls)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    p50 = statistics.median(walls)
    verdict = "met" if p50 <= TARGET_P50_MS else "NOT met"
    print(
        f"{what}: wall p50 {p50:.0f} ms, p90 {p90:.0f} ms, min {ordered[0]:.0f} ms; "
        f"CPU p50 {statistics.median(cpus):.0f} ms (n={len(walls)}; target p50 <= {TARGET_P50_MS:.0f} ms: "
        f"{verdict})",
        flush=True,
    )


def importtime_rows(argv: list[str], env: dict[str, str] | None = None) -> list[tuple[int, int, str]]:
    """(self us, cumulative us, indented name) of every module `python -X importtime ARGV` loaded."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], cwd=REPO, capture_output=True, text=True, env=env
    )
    rows = []
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if match:
            rows.append((int(match.group(1)), int(match.group(2)), match.group(3) + match.group(4)))
    return rows


def by_package(what: str, argv: list[str], env: dict[str, str], top: int) -> None:
    """Where a whole command's imports go: self time summed per top-level package."""
    totals: dict[str, int] = {}
    for own, _, name in importtime_rows(argv, env):
        package = name.strip().split(".")[0]
        totals[package] = totals.get(package, 0) + own
    ranked = sorted(totals.items(), key=lambda item: -item[1])
    print(f"imports of {what}: {sum(totals.values()) / 1000:.0f} ms in {len(totals)} top-level packages")
    print("  " + ", ".join(f"{package} {us / 1000:.1f}" for package, us in ranked[:top]) + " (ms, self time)")


def import_profile(top: int, root: Path | None) -> None:
    """The heaviest imports of `import pai.cli.main` (cumulative microseconds, as importtime
    prints them), and the modules of the families the command line should not need."""
    code = main_code(root, "import pai.cli.main")
    rows = [(cumulative, name) for _, cumulative, name in importtime_rows(["-c", code])]
    total = next((us for us, name in rows if name.strip() == "pai.cli.main"), 0)
    print(f"import pai.cli.main: {total / 1000:.0f} ms cumulative, {len(rows)} modules")
    for us, name in sorted(rows, reverse=True)[1 : top + 1]:
        print(f"  {us / 1000:7.1f} ms  {name.strip()} (depth {(len(name) - len(name.lstrip())) // 2})")
    names = [name.strip() for _, name in rows]
    for family in HEAVY:
        loaded = [name for name in names if name == family or name.startswith(family + ".")]
        print(f"  {family}: {len(loaded)} modules" + (f", e.g. {', '.join(loaded[:3])}" if loaded else ""))


def wait_until_up(process: subprocess.Popen[bytes], output: Path, within: float = 180.0) -> None:
    deadline = time.monotonic() + within
    while "press Ctrl-C to stop" not in output.read_text(errors="replace"):
        if process.poll() is not None:
            raise SystemExit(f"pai up exited {process.returncode}:\n{output.read_text(errors='replace')}")
        if time.monotonic() > deadline:
            raise SystemExit(f"pai up was not up within {within:g} s")
        time.sleep(0.2)


def job_list(runs: int, jobs: int, top: int, root: Path | None) -> None:
    """`pai up` in a temporary folder, J jobs run to their end, then `pai job list` N times."""
    pai = pai_command()
    folder = Path(tempfile.mkdtemp(prefix="cli-bench-"))
    port = free_port()
    server = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "PAI_CONFIG_DIR": str(folder / "config"),
        "PAI_SERVER": server,
        # The jobs name an image no machine here holds: their tasks run on the host.
        "PAI_TASK_ENGINE": "host",
        "PAI_TASK_USER": "none",
        "PAI_ADMIN_PASSWORD": ADMIN_PASSWORD,
    }
    env.pop("PAI_PASSWORD", None)
    output = folder / "up.out"
    with output.open("wb") as out:
        up = subprocess.Popen(
            [*pai, "up", "--data-dir", str(folder / "data"), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    try:
        wait_until_up(up, output)
        subprocess.run(
            [*pai, "login", "--user", "admin"], env={**env, "PAI_PASSWORD": ADMIN_PASSWORD}, check=True
        )
        for index in range(jobs):
            job_file = folder / f"job-{index}.yaml"
            job_file.write_text(JOB.format(name=f"bench-{index}"))
            subprocess.run([*pai, "job", "submit", str(job_file)], env=env, check=True, capture_output=True)
        # Measured once the jobs have ended: their tasks would share the CPU with the calls.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            listed = subprocess.run([*pai, "job", "list"], env=env, capture_output=True, text=True)
            if listed.stdout.count("SUCCEEDED") + listed.stdout.count("FAILED") >= jobs:
                break
            time.sleep(1)
        time.sleep(2)  # the platform settles after the last job
        cli = timed_cli(root)
        timed([*cli, "job", "list"], env, 2)  # warm, as for --help
        walls, cpus = timed([*cli, "job", "list"], env, runs)
        report(f"pai job list ({jobs} jobs)", walls, cpus)
        by_package("pai job list", ["-c", main_code(root), "job", "list"], env, top)
    finally:
        up.terminate()
        try:
            up.wait(30)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="calls of each command")
    parser.add_argument("--jobs", type=int, default=10, help="jobs the listed platform holds")
    parser.add_argument("--top", type=int, default=12, help="heaviest imports shown")
    parser.add_argument("--no-platform", action="store_true", help="skip `pai job list` (no `pai up`)")
    parser.add_argument("--root", type=Path, help="time the CLI of this export instead of this checkout's")
    args = parser.parse_args()
    env = {**os.environ, "PAI_CONFIG_DIR": tempfile.mkdtemp(prefix="cli-bench-config-")}
    cli = timed_cli(args.root)
    timed([*cli, "--help"], env, 2)  # warm: byte code compiled, files in the page cache
    report("pai --help", *timed([*cli, "--help"], env, args.runs))
    by_package("pai --help", ["-c", main_code(args.root), "--help"], env, args.top)
    shutil.rmtree(env["PAI_CONFIG_DIR"], ignore_errors=True)
    if not args.no_platform:
        job_list(args.runs, args.jobs, args.top, args.root)
    import_profile(args.top, args.root)


if __name__ == "__main__":
    main()
