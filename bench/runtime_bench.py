"""What the task runtime costs: start-up to the user's command, start-up to exit around a
trivial command, the memory of a task waiting at the gang barrier, the gang barrier, and log
capture with secret masking.

Run: .venv/bin/python bench/runtime_bench.py [--runs 40] [--engine auto|podman|docker]
With --engine, only a task in its docker image is measured (and a host task beside it): the
executor's look at the image, the task's bundle where runc runs the containers, the runtime
(forked by the fork server as the executor forks it, then spawned), and the container's start to
the command; and the CPU of each such task, all its processes, its removal included (a cpuacct
group of the benchmark's own, the containers nested under it). ``auto`` runs it as the
platform would here (runc itself beside Podman; PAI_CONTAINER_RUNNER), ``podman`` and
``docker`` through the engine's run.
Every task of every job starts through the runtime, so its own overhead is paid on each task
start; log capture sits between the user program and its log files for the task's whole life.
Tasks are started as the local executor starts them: forked by the runtime's fork server
(`ForkServer`, runtime/forkserver.py), and spawned as a new interpreter (`runtime_command`,
`runtime_path`), as the executor does without a fork server; the spawn-to-command figures are also
given for a plain `python -m runtime` (site module loaded).
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runtime.processes import runtime_command  # noqa: E402
from services.orchestrator.adapters.confinement import TaskGroups, detect  # noqa: E402
from services.orchestrator.adapters.forking import ForkServer  # noqa: E402
from services.orchestrator.adapters.isolation import task_environment  # noqa: E402
from services.orchestrator.adapters.local import runtime_path  # noqa: E402
from services.orchestrator.core.limits import task_limits  # noqa: E402

# The command writes the moment it starts (bash's own clock, microseconds) and ends.
STARTED = 'printf %s "$EPOCHREALTIME" > "$PAI_BENCH_STARTED"'


def spec(root: Path, role: str, roles: list[str], entrypoint: str, **extra: Any) -> Path:
    data: dict[str, Any] = {
        "job": {"user": "bench", "name": "bench", "uid": "bench-1", "attempt_id": 0},
        "role": role,
        "index": 0,
        "entrypoint": entrypoint,
        "roles": [{"name": r, "instances": 1, "resources": {"cpu": 1, "memory_mb": 256}} for r in roles],
        "tasks": [{"role": r, "index": 0, "host_ip": "127.0.0.1"} for r in roles],
        "dirs": {
            "work_dir": str(root / role / "work"),
            "log_dir": str(root / role / "logs"),
            "barrier_dir": str(root / "barrier"),
        },
        **extra,
    }
    path = root / f"{role}.json"
    path.write_text(json.dumps(data))
    return path


PLAIN_ROOT = [ROOT]  # --plain-root: where a plain `python -m runtime` takes the runtime from


def start(path: Path, plain: bool = False, **env: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "runtime", "--spec", str(path)] if plain else runtime_command(path)
    return subprocess.Popen(
        argv,
        cwd=PLAIN_ROOT[0] if plain else ROOT,
        # The executor's environment: none of this process's own settings (PYTHONDONTWRITEBYTECODE
        # among them, which would make every start compile the runtime from source).
        env=task_environment(os.environ, PYTHONPATH=str(PLAIN_ROOT[0]) if plain else runtime_path(), **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def percentile(ms: list[float], q: float) -> float:
    ordered = sorted(ms)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(label: str, samples: list[float]) -> None:
    ms = [s * 1000 for s in samples]
    print(
        f"{label:62} p50 {statistics.median(ms):7.1f} ms  p99 {percentile(ms, 0.99):7.1f} ms"
        f"  max {max(ms):7.1f} ms  (n={len(ms)})"
    )


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def spawn_to_command(runs: int, plain: bool) -> tuple[list[float], list[float], float]:
    """Spawn to the user command's first instant, spawn to the runtime's exit, and the CPU time
    (user + system) of one whole run, the command's included, which a busy machine leaves as is."""
    to_command, to_exit = [], []
    cpu_before = children_cpu()
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            marker = Path(tmp) / "started"
            path = spec(Path(tmp), "worker", ["worker"], STARTED)
            t0 = time.time()
            proc = start(path, plain, PAI_BENCH_STARTED=str(marker))
            assert proc.wait() == 0
            to_exit.append(time.time() - t0)
            to_command.append(float(marker.read_text()) - t0)
    return to_command, to_exit, (children_cpu() - cpu_before) / runs


def contained(root: Path, groups: TaskGroups, name: str) -> dict[str, Any]:
    """What the executor of a root platform adds to a task's spec: a tenant's uid, the task's
    cgroups made now (counted in its start), the runtime's private folder."""
    work = root / "worker" / "work"
    work.mkdir(parents=True)
    os.chown(work, BENCH_UID, BENCH_UID)
    (root / "worker" / "private").mkdir(mode=0o700)
    limits = task_limits(1, 256, [], Path("/proc/devices").read_text(), groups.defaults)
    return {
        "run_as": {"name": "bench", "uid": BENCH_UID, "gid": BENCH_UID},
        "confine": {"cgroups": [str(g) for g in groups.create(name, limits)]},
    }


BENCH_UID = 1_800_999_999
BENCH_IMAGE = "localhost/pai-bench-runtime:1"


CPUACCT = Path("/sys/fs/cgroup/cpuacct")


class CpuGroup:
    """A cpuacct group of the benchmark's own, this process in it: what every process of a task
    start uses (this process's look at the image and bundle, the runtime, the engine's client,
    its monitor and the OCI runtime, which leave this process's tree, the command) is counted
    in it, as the containers are nested under it (``--cgroup-parent``, cgroupsPath)."""

    def __init__(self) -> None:
        self.path = f"/pai-bench-{os.getpid()}"
        self.group = CPUACCT / self.path.lstrip("/")
        self.group.mkdir(exist_ok=True)
        (self.group / "cgroup.procs").write_text(str(os.getpid()))

    def used(self) -> float:
        return int((self.group / "cpuacct.usage").read_text()) / 1e9

    def close(self) -> None:
        from services.orchestrator.adapters.local import remove_engine_groups

        (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
        remove_engine_groups(self.path, set())


Measured = tuple[list[float], list[float], float | None]


def in_image(runs: int, engine_name: str) -> tuple[str, dict[str, Measured]]:
    """Request to the command and to exit of a task in a local busybox+bash image, as the executor
    starts it: its look at the image (as for an attempt's first task; the engine is asked again
    only when its list of images changed), the task's bundle where runc runs the containers
    (`--engine auto` on a machine with runc: the image's mount and its template made once before,
    as the executor keeps them), the runtime's start (forked by the fork server, as the executor
    does, and spawned as a new interpreter, as without one), and the container's; the command
    writes bash's clock inside the container. Also the CPU of each task, removal included (None
    where no cpuacct group can be made)."""
    from services.orchestrator.adapters.engines import detect_engine
    from tests.support.images import build_marker_image, remove_image

    with tempfile.TemporaryDirectory() as conf:
        auto = engine_name == "auto"
        engine = detect_engine(
            "auto" if auto else engine_name, Path(conf), "auto" if auto else "engine"
        ).engine
        assert engine is not None, "no container engine here"
        build_marker_image(BENCH_IMAGE, "bench")
        group = CpuGroup() if CPUACCT.is_dir() and os.geteuid() == 0 else None
        try:
            runner = {"runc": "runc", "bwrap": "bubblewrap"}.get(engine.runner, engine.name)
            measured = asyncio.run(_in_image(runs, engine, Path(conf), group))
        finally:
            if group is not None:
                group.close()
            remove_image(BENCH_IMAGE)
    return runner, measured


async def _in_image(runs: int, engine: Any, conf: Path, group: CpuGroup | None) -> dict[str, Measured]:
    from services.orchestrator.adapters.bundling import Bundles, remove_rootfs, remove_task_containers
    from services.orchestrator.adapters.engines import ImageLookups, find_image
    from services.orchestrator.core.containers import ContainerPlan, container_name, run_arguments
    from services.orchestrator.core.sandboxes import SandboxTools

    bundles = Bundles(engine, conf, "bench") if engine.runner in ("runc", "bwrap") else None
    # bubblewrap runs a task as a tenant (never root): nobody's uid here, as a tenant's would be.
    user = "65534:65534" if engine.runner == "bwrap" else "0:0"
    lookups = ImageLookups()
    env = task_environment(os.environ, PYTHONPATH=runtime_path())
    server = ForkServer(env, conf)
    await server.start()

    def plan_for(image: str, n: int, work: Path) -> ContainerPlan:
        return ContainerPlan(
            engine=engine.name,
            image=image,
            name=container_name(f"bench-{os.getpid()}", 0, "worker", 0, n),
            user=user,
            work_dir=str(work),
            labels=(),
            memory_mb=256,
            cpus=1,
            pids=4096,
            cgroup_parent=group.path if group else None,
        )

    async def one(n: int, root: Path, fork: bool) -> tuple[float, float]:
        work = root / "worker" / "work"
        private = root / "worker" / "private"
        work.mkdir(parents=True)
        private.mkdir(mode=0o700)
        if engine.runner == "bwrap":  # the tenant reaches its work dir, as a task's does
            os.chmod(root, 0o755)
            os.chown(work, 65534, 65534)
        t0 = time.time()
        image = await find_image(engine, BENCH_IMAGE, "never", lookups)
        plan = plan_for(image.run, n, work)
        container: dict[str, Any] = {"engine": engine.program, "image": image.run, "env": engine.env}
        if bundles is not None and engine.runner == "bwrap":
            sandbox = await bundles.sandbox(plan, root / "worker", private, SandboxTools(*engine.sandbox))
            container.update(run=[], sandbox=json.loads(json.dumps(sandbox.as_dict(), default=str)))
        elif bundles is not None:
            config = await bundles.prepare(plan, root / "worker", private)
            runc = {
                "program": engine.runc,
                "root": str(bundles.state),
                "config": str(config),
                "name": plan.name,
            }
            container.update(run=[], runc=runc)
        else:
            container.update(run=run_arguments(plan))
        dirs = {
            "work_dir": str(work),
            "log_dir": str(root / "worker" / "logs"),
            "barrier_dir": str(root / "barrier"),
            "private_dir": str(private),
        }
        path = spec(
            root, "worker", ["worker"], 'printf %s "$EPOCHREALTIME" > started', container=container, dirs=dirs
        )
        if fork:
            lock = os.open(root / "task.lock", os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            out = os.open(os.devnull, os.O_WRONLY)
            try:
                _, exited = await server.spawn(path, ROOT, lock, out)
            finally:
                os.close(lock)
                os.close(out)
            assert await exited == 0
        else:
            assert start(path).wait() == 0
        ended = time.time() - t0
        if bundles is not None:  # what the executor does at every task's end
            await remove_task_containers(engine.runc, bundles.state, plan.name)
            remove_rootfs(root / "worker", private)
        return float((work / "started").read_text()) - t0, ended

    measured: dict[str, Measured] = {}
    try:
        # The executor's first task of the image looks at it, mounts it and makes its template.
        t0 = time.time()
        with tempfile.TemporaryDirectory() as tmp:
            await one(runs, Path(tmp), True)
        once = "the first task of the image (its mount and template made)"
        print(f"{once:62} {(time.time() - t0) * 1000:7.1f} ms")
        for way in ("forked", "spawned"):
            to_command, to_exit = [], []
            cpu_before = group.used() if group else 0.0
            for n in range(runs):
                with tempfile.TemporaryDirectory() as tmp:
                    command, ended = await one(n, Path(tmp), way == "forked")
                to_command.append(command)
                to_exit.append(ended)
            cpu = (group.used() - cpu_before) / runs if group else None
            measured[way] = (to_command, to_exit, cpu)
    finally:
        await server.close()
        if bundles is not None:
            await bundles.close()
    return measured


async def forked(
    runs: int, groups: TaskGroups | None = None
) -> tuple[list[float], list[float], float, dict[str, float]]:
    """As `spawn_to_command`, for runtimes forked by a fork server (its fork included in the CPU),
    and the memory of a forked task waiting at the barrier. With ``groups``, each task is
    contained as a root platform contains it (its own uid, its cgroups made before its start)."""
    to_command, to_exit = [], []
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        marker = Path(tmp) / "started"
        marker.touch(mode=0o666)  # a contained task writes it as its own uid
        marker.chmod(0o666)
        env = task_environment(os.environ, PYTHONPATH=runtime_path(), PAI_BENCH_STARTED=str(marker))
        server = ForkServer(env, Path(tmp))
        await server.start()
        assert server.pid is not None
        process = psutil.Process(server.pid)

        async def fork(path: Path, root: Path) -> tuple[int, asyncio.Future[int]]:
            lock = os.open(root / f"{path.stem}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            out = os.open(os.devnull, os.O_WRONLY)
            try:
                return await server.spawn(path, ROOT, lock, out)
            finally:
                os.close(lock)
                os.close(out)

        times = process.cpu_times()
        cpu_before = sum(times[:4])
        for n in range(runs):
            with tempfile.TemporaryDirectory() as run:
                os.chmod(run, 0o755)
                t0 = time.time()
                extra = contained(Path(run), groups, f"bench-{os.getpid()}-{n}") if groups else {}
                path = spec(Path(run), "worker", ["worker"], STARTED, **extra)
                _, exited = await fork(path, Path(run))
                assert await exited == 0
                to_exit.append(time.time() - t0)
                to_command.append(float(marker.read_text()) - t0)
                if groups:
                    groups.remove(Path(g) for g in extra["confine"]["cgroups"])
        cpu = (sum(process.cpu_times()[:4]) - cpu_before) / runs
        with tempfile.TemporaryDirectory() as run:
            path = spec(Path(run), "master", ["master", "worker"], "true")
            pid, exited = await fork(path, Path(run))
            ready = Path(run) / "barrier" / "master-0.ready"
            deadline = time.monotonic() + 30
            while not ready.exists():
                assert time.monotonic() < deadline, "the task never announced itself"
                await asyncio.sleep(0.01)
            info = psutil.Process(pid).memory_full_info()
            memory = {"rss": info.rss / 1e6, "pss": info.pss / 1e6, "uss": info.uss / 1e6}
            os.kill(pid, signal.SIGTERM)
            await exited
        await server.close()
    return to_command, to_exit, cpu, memory


def waiting_memory() -> dict[str, float]:
    """RSS, PSS and USS (MB) of a task waiting at the barrier for a peer that never comes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = spec(Path(tmp), "master", ["master", "worker"], "true")
        proc = start(path)
        try:
            ready = Path(tmp) / "barrier" / "master-0.ready"
            deadline = time.monotonic() + 30
            while not ready.exists():
                assert time.monotonic() < deadline, "the task never announced itself"
                assert proc.poll() is None, "the task ended before it announced itself"
                time.sleep(0.01)
            info = psutil.Process(proc.pid).memory_full_info()
            return {"rss": info.rss / 1e6, "pss": info.pss / 1e6, "uss": info.uss / 1e6}
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument(
        "--plain-root",
        type=Path,
        default=ROOT,
        help="a tree to take the plain `python -m runtime` from (an export of main: the figure before)",
    )
    parser.add_argument(
        "--engine",
        choices=["auto", "podman", "docker"],
        help="measure a task in its image (auto: as the platform would run it here)",
    )
    args = parser.parse_args()
    runs = args.runs
    PLAIN_ROOT[0] = args.plain_root.resolve()
    if args.engine:
        runner, measured = in_image(runs, args.engine)
        for way, (to_command, to_exit, image_cpu) in measured.items():
            how = "" if way == "forked" else ", its runtime spawned"
            report(f"one task in its image ({runner}){how}: request to the command", to_command)
            report(f"one task in its image ({runner}){how}: request to exit", to_exit)
            if image_cpu is not None:
                label = f"one task in its image ({runner}){how}: CPU per task"
                print(f"{label:62} {image_cpu * 1000:7.1f} ms")
        to_command, to_exit, host_cpu = spawn_to_command(runs, plain=False)
        report("one task on the host, spawned: spawn to the command", to_command)
        print(f"{'one task on the host, spawned: CPU per task, spawn to exit':62} {host_cpu * 1000:7.1f} ms")
        return

    to_command, to_exit, cpu, forked_memory = asyncio.run(forked(runs))
    report("one task, forked by the fork server: request to the command", to_command)
    report("one task, forked by the fork server: request to exit", to_exit)
    print(f"{'one task, forked by the fork server: CPU per task, fork to exit':62} {cpu * 1000:7.1f} ms")
    print(
        f"{'a forked task waiting at the barrier: resident memory':62} RSS {forked_memory['rss']:.1f} MB, "
        f"PSS {forked_memory['pss']:.1f} MB, USS {forked_memory['uss']:.1f} MB"
    )
    groups = TaskGroups(detect(Path(tempfile.gettempdir()) / "runtime-bench"))
    if groups.uses_cgroups:
        to_command, to_exit, cpu, _ = asyncio.run(forked(runs, groups))
        label = "one task, forked, contained (own uid, cgroups made)"
        report(f"{label}: request to the command", to_command)
        report(f"{label}: request to exit", to_exit)
        print(f"{f'{label}: CPU per task':62} {cpu * 1000:7.1f} ms")
    else:
        print(f"one task, forked, contained: not measured ({groups.confinement.describe()})")
    to_command, to_exit, cpu = spawn_to_command(runs, plain=False)
    report("one task, spawned as a new interpreter: spawn to the command", to_command)
    report("one task, spawned as a new interpreter: spawn to exit", to_exit)
    print(f"{'one task, spawned as a new interpreter: CPU per task, spawn to exit':62} {cpu * 1000:7.1f} ms")
    plain_command, _, plain_cpu = spawn_to_command(runs, plain=True)
    plain = "plain `python -m runtime`" + ("" if PLAIN_ROOT[0] == ROOT else f" of {PLAIN_ROOT[0].name}")
    report(f"one task, {plain}: spawn to the command", plain_command)
    print(f"{f'one task, {plain}: CPU per task':62} {plain_cpu * 1000:7.1f} ms")

    pair = []
    for n in range(max(5, runs // 3)):
        with tempfile.TemporaryDirectory() as tmp:
            a = spec(Path(tmp), "master", ["master", "worker"], "true")
            b = spec(Path(tmp), "worker", ["master", "worker"], "true")
            t0 = time.perf_counter()
            procs = [start(a), start(b)]
            assert all(p.wait() == 0 for p in procs), n
            pair.append(time.perf_counter() - t0)
    report("two tasks through the gang barrier, spawn to both exited", pair)

    memory = waiting_memory()
    print(
        f"{'a task waiting at the barrier: resident memory':62} RSS {memory['rss']:.1f} MB, "
        f"PSS {memory['pss']:.1f} MB, USS {memory['uss']:.1f} MB"
    )

    megabytes = 64
    with tempfile.TemporaryDirectory() as tmp:
        secrets = Path(tmp) / "secrets.json"
        secrets.write_text(json.dumps({"a": "alpha-secret", "b": "beta-secret"}))
        command = f"head -c {megabytes * 1024 * 1024} /dev/zero | tr '\\0' 'x' | fold -w 99"
        path = spec(Path(tmp), "worker", ["worker"], command, secrets_file=str(secrets))
        t0 = time.perf_counter()
        assert start(path).wait() == 0
        elapsed = time.perf_counter() - t0
    label = "log capture, 100-byte lines, 2 secrets masked"
    print(f"{label:62} {megabytes / elapsed:7.1f} MB/s ({megabytes} MB)")


if __name__ == "__main__":
    main()
