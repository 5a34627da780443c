"""Chaos on the embedded platform: every process killed with SIGKILL while jobs run; nothing lost.

Brings the platform up as `pai up` does (the bus and every service supervised, in a temporary
data dir), submits N jobs of two tasks each (a few seconds of work; every execution of a task
leaves one marker file naming its job, role, index, job attempt and task attempt), and while
they run kills every process of the platform in turn with SIGKILL, nats-server included, at
random moments, for several rounds. Then it waits for every job to end and reports:

- lost: submissions answered 202 that the job list does not show;
- stuck: listed jobs not in a final state when the wait ends;
- twice: task executions beyond the first within one attempt (markers with the same key);
- per kill: the process, seconds until GET /api/v2/info answered again, seconds until the
  next task started;
- client-side errors by kind (connection refused, 503, timeouts, ...);
- why each job that ended FAILED or STOPPED ended so (its exit code, phrase and diagnostics,
  the task that triggered the end and that task's own diagnostics, and its retries);

and exits 1 unless lost, stuck and twice are all 0.

Command: .venv/bin/python bench/chaos_bench.py [--jobs N] [--rounds R] [--work S] [--seed X]
[--kill NAME ...] (`make bench ARGS="chaos"` runs the defaults: 1,000 jobs, 3 rounds, every
process; `--kill nats` kills only the bus, once per round).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import nats
from nats.aio.msg import Msg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pai.embedded.platform import EmbeddedPlatform, free_port
from services.orchestrator.adapters.engines import containers_of, detect_engine, platform_label
from services.orchestrator.core.containers import LABEL_PLATFORM
from tests.support.images import build_marker_image, remove_image
from tests.support.sandboxes import bwrap_processes

# Their jobs name images such as python:3.11 that no machine here holds: tasks run on the host
# unless the run asks for an engine (PAI_TASK_ENGINE).
os.environ.setdefault("PAI_TASK_ENGINE", "host")

ADMIN_PASSWORD = "chaos-admin-pass"
FINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
CHAOS_IMAGE = "localhost/pai-chaos:1"
# One marker per execution, named by what must run once: job, role, index, job and task attempt.
MARKER = "$PAI_JOB_NAME.$PAI_CURRENT_TASK_ROLE_NAME.$PAI_TASK_INDEX.$PAI_JOB_ATTEMPT_ID.$FC_TASK_ATTEMPT_ID"
JOB = """protocolVersion: 2
name: {name}
type: job
prerequisites:
  - {{name: image, type: dockerimage, uri: {image}}}
taskRoles:
  work:
    instances: {instances}
    dockerImage: image
    resourcePerInstance: {{cpu: {cpu}, memoryMB: 64, gpu: 0}}
    commands:
      - 'mkdir -p "{markers}"'
      - 'mktemp "{markers}/{marker}.XXXXXX" >/dev/null'
      - sleep {work}
"""


@dataclass
class Kill:
    process: str
    at: float
    api_back: float | None = None
    next_running: float | None = None


@dataclass
class Report:
    jobs: int
    accepted: int = 0
    listed: int = 0
    final: int = 0
    by_state: dict[str, int] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    twice: dict[str, int] = field(default_factory=dict)
    # Why each job that did not succeed ended as it did, from its detail (job name -> reason).
    unsuccessful: dict[str, str] = field(default_factory=dict)
    executions: int = 0
    expected: int = 0  # task executions without retries: two per accepted job, and the large job's
    kills: list[Kill] = field(default_factory=list)
    client_errors: collections.Counter[str] = field(default_factory=collections.Counter)
    seconds: float = 0.0
    containers_left: int = 0

    @property
    def ok(self) -> bool:
        return not self.lost and not self.stuck and not self.twice and not self.containers_left

    def as_dict(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "accepted": self.accepted,
            "listed": self.listed,
            "final": self.final,
            "by_state": self.by_state,
            "lost": len(self.lost),
            "stuck": len(self.stuck),
            "twice": sum(self.twice.values()),
            "unsuccessful": self.unsuccessful,
            "executions": self.executions,
            "expected": self.expected,
            "client_errors": dict(self.client_errors),
            "kills": [k.__dict__ for k in self.kills],
            "seconds": round(self.seconds, 1),
            "containers_left": self.containers_left,
        }


class Client:
    """The API as a patient user's script sees it: retries refusals, counts every error by kind."""

    def __init__(self, api_url: str, report: Report) -> None:
        self.http = httpx.AsyncClient(base_url=api_url, timeout=10.0)
        self.report = report

    async def login(self) -> None:
        while True:
            try:
                answer = await self.http.post(
                    "/api/v2/authn/basic/login", json={"username": "admin", "password": ADMIN_PASSWORD}
                )
                if answer.status_code == 200:
                    self.http.headers["Authorization"] = f"Bearer {answer.json()['token']}"
                    return
                self._count(f"login {answer.status_code}")
            except httpx.TransportError as exc:
                self._count(_kind(exc))
            await asyncio.sleep(0.2)

    def _count(self, kind: str) -> None:
        self.report.client_errors[kind] += 1

    async def submit(self, name: str, text: str) -> bool:
        """True once the job is accepted (202, or 409 after a retry of one that was accepted)."""
        retried = False
        while True:
            try:
                answer = await self.http.post(
                    "/api/v2/jobs", content=text, headers={"Content-Type": "text/yaml"}
                )
            except httpx.TransportError as exc:
                self._count(_kind(exc))
                retried = True
                await asyncio.sleep(0.3)
                continue
            if answer.status_code == 202:
                return True
            if answer.status_code == 409 and retried:
                return True  # an earlier try was accepted; its answer was lost with the connection
            self._count(f"submit {answer.status_code} {_code(answer)}")
            if answer.status_code == 401:
                await self.login()
            elif answer.status_code in (429, 503) or answer.status_code >= 500:
                await asyncio.sleep(float(answer.headers.get("Retry-After", "0.5")))
                retried = retried or answer.status_code >= 500
            else:
                return False

    async def jobs(self) -> list[dict[str, Any]] | None:
        try:
            answer = await self.http.get("/api/v2/jobs", params={"limit": "50000"})
        except httpx.TransportError as exc:
            self._count(_kind(exc))
            return None
        if answer.status_code != 200:
            self._count(f"list {answer.status_code} {_code(answer)}")
            if answer.status_code == 401:
                await self.login()
            return None
        return list(answer.json())

    async def detail(self, username: str, name: str) -> dict[str, Any] | None:
        try:
            answer = await self.http.get(f"/api/v2/jobs/{username}~{name}")
        except httpx.TransportError as exc:
            self._count(_kind(exc))
            return None
        if answer.status_code != 200:
            self._count(f"detail {answer.status_code} {_code(answer)}")
            return None
        detail: dict[str, Any] = answer.json()
        return detail

    async def until_info_ok(self) -> None:
        """Ask until the API answers (an HTTP port has no event to await)."""
        while True:
            if await self.info_ok():
                return
            await asyncio.sleep(0.05)

    async def info_ok(self) -> bool:
        try:
            return (await self.http.get("/api/v2/info", timeout=1.0)).status_code == 200
        except httpx.TransportError:
            return False


def _kind(exc: Exception) -> str:
    if isinstance(exc, httpx.ConnectError):
        return "connection refused"
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    return type(exc).__name__


def _code(answer: httpx.Response) -> str:
    try:
        return str(answer.json().get("code", ""))
    except ValueError:
        return ""


def why_ended(detail: dict[str, Any]) -> str:
    """One line on how a job that did not succeed ended: the job's exit, then its trigger task's."""
    status = detail.get("jobStatus") or {}
    spec = status.get("appExitSpec") or {}
    parts = [
        f"{status.get('state')} exit {status.get('appExitCode')} ({spec.get('phrase') or 'no phrase'})",
        str(status.get("appExitDiagnostics") or "no diagnostics"),
    ]
    role, index = status.get("appExitTriggerTaskRoleName"), status.get("appExitTriggerTaskIndex")
    if role is not None:
        statuses = ((detail.get("taskRoles") or {}).get(role) or {}).get("taskStatuses") or []
        task = next((t for t in statuses if t.get("taskIndex") == index), None)
        if task is not None:
            task_spec = task.get("containerExitSpec") or {}
            parts.append(
                f"task {role}[{index}] attempt {task.get('attemptId')}: exit "
                f"{task.get('containerExitCode')} ({task_spec.get('phrase') or 'no phrase'}) "
                f"{task.get('containerExitDiagnostics') or ''}".rstrip()
            )
    retries = status.get("retryDetails") or {}
    parts.append(f"retries {status.get('retries')} {retries}")
    return "; ".join(parts)


def marker_files(markers: Path, data_dir: Path, in_images: bool) -> list[Path]:
    """Every task execution's marker: in the caller's folder, or in the tasks' work dirs."""
    return list(data_dir.glob("**/chaos-markers/*")) if in_images else list(markers.iterdir())


def count_markers(markers: list[Path]) -> tuple[int, dict[str, int]]:
    keys = collections.Counter(path.name.rsplit(".", 1)[0] for path in markers)
    return sum(keys.values()), {key: n - 1 for key, n in keys.items() if n > 1}


async def run(
    jobs: int,
    rounds: int,
    work: float,
    seed: int,
    concurrency: int,
    settle: float,
    data_dir: Path,
    kill_only: tuple[str, ...] = (),
    large: int = 0,
    engine: str | None = None,
) -> Report:
    """One chaos run; `kill_only` names the processes killed each round (empty: every one);
    `large`, when above 0, adds one job of that many tasks (no CPU asked), submitted first."""
    rng = random.Random(seed)
    report = Report(jobs=jobs)
    markers = data_dir.parent / "markers"
    markers.mkdir(parents=True, exist_ok=True)
    image, written = "python:3.11-slim", str(markers)
    engine_env: dict[str, str] = {}
    if engine is not None:
        # The tasks run in a local busybox+bash image, never pulled, and write their markers in
        # their work dirs (the caller's folder is not in their containers): counted there.
        image, written = CHAOS_IMAGE, "chaos-markers"
        build_marker_image(CHAOS_IMAGE, "chaos")
        engine_env = {"PAI_TASK_ENGINE": engine, "PAI_IMAGE_PULL": "never"}
    platform = EmbeddedPlatform(
        data_dir,
        api_port=free_port(),
        admin_password=ADMIN_PASSWORD,
        extra_env={
            "PAI_RATE_LIMIT_API_PER_MIN": "0",
            "PAI_RATE_LIMIT_LIST_JOB_PER_MIN": "0",
            "PAI_LOG_LEVEL": "warning",
            # The tasks write their markers into the caller's folder, which an unprivileged task
            # user may not enter: they run as the platform's user here.
            "PAI_TASK_USER": "none",
            # Many small jobs at once on a small machine: the node is declared larger than the
            # machine, as an admin may (all tasks together are still held to the machine's).
            "PAI_CPU_OVERCOMMIT": os.environ.get("PAI_CPU_OVERCOMMIT", "16"),
            "PAI_MEMORY_OVERCOMMIT": os.environ.get("PAI_MEMORY_OVERCOMMIT", "4"),
            **engine_env,
        },
    )
    started = time.monotonic()
    info = await platform.start()
    client = Client(info.api_url, report)
    task_starts: list[float] = []

    async def on_started(msg: Msg) -> None:
        task_starts.append(time.monotonic())

    async def quiet(exc: Exception) -> None:
        return None  # the bench kills the bus on purpose; its reconnects are expected

    nc = await nats.connect(
        info.nats_url,
        **info.nats_options(),  # the bus is private: the operator's account, over TLS
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.2,
        error_cb=quiet,
    )
    await nc.subscribe("pai.job.*.task.started", cb=on_started)
    try:
        await client.login()
        accepted: set[str] = set()
        names = [f"chaos-{i:05d}" for i in range(jobs)]
        if large:
            text = JOB.format(
                name="chaos-large",
                instances=large,
                cpu=0,
                markers=written,
                marker=MARKER,
                work=work,
                image=image,
            )
            if await client.submit("chaos-large", text):
                accepted.add("chaos-large")
                report.expected += large
        queue: asyncio.Queue[str] = asyncio.Queue()
        for name in names:
            queue.put_nowait(name)

        async def submitter() -> None:
            while not queue.empty():
                name = queue.get_nowait()
                text = JOB.format(
                    name=name, instances=2, cpu=1, markers=written, marker=MARKER, work=work, image=image
                )
                if await client.submit(name, text):
                    accepted.add(name)
                    report.expected += 2

        submitting = [asyncio.create_task(submitter()) for _ in range(concurrency)]

        async def killer() -> None:
            assert platform.supervisor is not None
            for _ in range(rounds):
                order = [c.name for c in platform.supervisor.children if not kill_only or c.name in kill_only]
                rng.shuffle(order)
                for name in order:
                    await asyncio.sleep(rng.uniform(1.0, 4.0))
                    pid = platform.supervisor.pids().get(name)
                    if pid is None:
                        continue
                    kill = Kill(name, time.monotonic())
                    os.kill(pid, signal.SIGKILL)
                    report.kills.append(kill)
                    await client.until_info_ok()
                    kill.api_back = time.monotonic() - kill.at

        await killer()
        await asyncio.gather(*submitting)
        report.accepted = len(accepted)

        # Every accepted job must end; the wait is long enough for the slowest recovery.
        deadline = time.monotonic() + settle + jobs * work * 2 / max(1, os.cpu_count() or 1)
        listed: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            found = await client.jobs()
            if found is not None:
                listed = found
                if all(job["state"] in FINAL for job in listed) and {j["name"] for j in listed} >= accepted:
                    break
            await asyncio.sleep(1.0)
        states = {job["name"]: job["state"] for job in listed}
        report.listed = len(listed)
        report.lost = sorted(accepted - states.keys())
        report.stuck = sorted(name for name, state in states.items() if state not in FINAL)
        report.final = sum(1 for state in states.values() if state in FINAL)
        report.by_state = dict(collections.Counter(states.values()))
        for job in listed:
            if job["state"] in ("FAILED", "STOPPED"):
                detail = await client.detail(job["username"], job["name"])
                report.unsuccessful[job["name"]] = why_ended(detail) if detail else "(no detail)"
        files = await asyncio.to_thread(marker_files, markers, data_dir, engine is not None)
        report.executions, report.twice = count_markers(files)
        if engine is not None:
            report.containers_left = len(await leftover_containers(data_dir))
        for kill in report.kills:
            after = [t for t in task_starts if t > kill.at]
            kill.next_running = min(after) - kill.at if after else None
        report.seconds = time.monotonic() - started
        return report
    finally:
        await nc.close()
        await client.http.aclose()
        await platform.stop()
        if engine is not None:
            remove_image(CHAOS_IMAGE)


async def leftover_containers(data_dir: Path) -> list[str]:
    """Containers of this platform still there once every job is final (there must be none):
    the engine's, runc's (its state directory), bubblewrap's (a process whose arguments name the
    data dir) and the tasks' overlays."""
    choice = detect_engine("auto", data_dir)
    if choice.engine is None:
        return []
    left = await containers_of(choice.engine, LABEL_PLATFORM, platform_label(data_dir))
    return left + await asyncio.to_thread(_left_on_the_node, data_dir)


def _left_on_the_node(data_dir: Path) -> list[str]:
    from services.orchestrator.adapters.bundling import STATE_DIR, overlays_under

    state = data_dir / STATE_DIR
    left = [f"runc {entry.name}" for entry in (state.iterdir() if state.is_dir() else [])]
    left += [f"overlay {path}" for path in overlays_under(data_dir)]
    return left + bwrap_processes(str(data_dir))


def print_report(report: Report) -> None:
    print(f"jobs {report.jobs}: accepted {report.accepted}, listed {report.listed}, final {report.final}")
    print(f"states: {report.by_state}")
    print(f"lost {len(report.lost)}  stuck {len(report.stuck)}  twice {sum(report.twice.values())}")
    print(f"task executions: {report.executions} (expected {report.expected} without retries)")
    print("kills:")
    for kill in report.kills:
        back = f"{kill.api_back:.2f} s" if kill.api_back is not None else "never"
        running = f"{kill.next_running:.2f} s" if kill.next_running is not None else "no task started after"
        print(f"  {kill.process:<13} API answered after {back:<9} next task started after {running}")
    for name in sorted({k.process for k in report.kills}):
        backs = [k.api_back for k in report.kills if k.process == name and k.api_back is not None]
        if backs:
            print(f"  {name:<13} API back: median {statistics.median(backs):.2f} s, max {max(backs):.2f} s")
    print(f"client errors: {dict(report.client_errors) or 'none'}")
    if report.lost:
        print(f"lost: {report.lost[:10]}")
    if report.stuck:
        print(f"stuck: {report.stuck[:10]}")
    if report.twice:
        print(f"twice: {list(report.twice.items())[:10]}")
    for name, why in sorted(report.unsuccessful.items()):
        print(f"ended unsuccessfully: {name}: {why}")
    print(f"containers left: {report.containers_left}")
    print(f"wall time {report.seconds:.0f} s")
    print("OK" if report.ok else "FAILED: lost, stuck and twice must all be 0")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000, help="jobs to submit (two tasks each)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of killing every process once")
    parser.add_argument("--work", type=float, default=3.0, help="seconds of work per task")
    parser.add_argument("--seed", type=int, default=1, help="seed of the kill order and moments")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent submitting clients")
    parser.add_argument("--settle", type=float, default=300.0, help="seconds to wait for jobs to end")
    parser.add_argument(
        "--kill",
        action="append",
        default=[],
        metavar="NAME",
        help="kill only this process each round (nats or a service; repeatable; default: all)",
    )
    parser.add_argument(
        "--large", type=int, default=0, metavar="TASKS", help="also one job of TASKS tasks, submitted first"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON too")
    parser.add_argument(
        "--engine",
        choices=["auto", "podman", "docker"],
        help="run the tasks in a local image through this engine (auto: the one pai up would use)",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="run in DIR (made anew) and keep it: the data dir and markers",
    )
    args = parser.parse_args()
    if args.keep is not None:
        args.keep.mkdir(parents=True)
    with (
        contextlib.nullcontext(str(args.keep))
        if args.keep
        else tempfile.TemporaryDirectory(prefix="pai-chaos-") as tmp
    ):
        report = asyncio.run(
            run(
                args.jobs,
                args.rounds,
                args.work,
                args.seed,
                args.concurrency,
                args.settle,
                Path(tmp) / "data",
                tuple(args.kill),
                args.large,
                args.engine,
            )
        )
    print_report(report)
    if args.json:
        print(json.dumps(report.as_dict()))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
