"""The local executor with real processes: runtime launch, exit reports, stop, probe and adopt."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import stat
from pathlib import Path
from typing import Any

import psutil
import pytest

from libs.protocol.jobs import JobConfig
from runtime.processes import find_runtimes
from services.orchestrator.adapters import local, specs
from services.orchestrator.adapters.executing import AlreadyRunningError, TaskExit
from services.orchestrator.adapters.local import LocalExecutor, lock_is_held
from services.orchestrator.core.deciders import decide
from services.orchestrator.core.effects import Context
from services.orchestrator.core.frameworks import Framework, TaskKey
from tests.orchestrator.jobs import job_config
from tests.orchestrator.sim import T0, scheduled, submitted

KEY = TaskKey(0, "worker", 0, 0)


def framework_for(config: JobConfig) -> Framework:
    fw = decide(None, submitted(config), Context(now=T0)).framework
    fw = decide(fw, scheduled(config), Context(now=T0)).framework
    assert fw is not None
    return fw


class Exits:
    """Collects task exits; `next()` waits for the next one."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[TaskExit] = asyncio.Queue()

    async def __call__(self, exit_: TaskExit) -> None:
        await self.queue.put(exit_)

    async def next(self) -> TaskExit:
        return await asyncio.wait_for(self.queue.get(), 60)


async def no_secrets(_job_id: str) -> dict[str, Any] | None:
    return None


def executor(tmp_path: Path, exits: Exits, secrets: Any = no_secrets, grace: float = 5.0) -> LocalExecutor:
    return LocalExecutor(tmp_path / "data", exits, secrets, grace_seconds=grace, poll_seconds=0.05)


async def test_a_task_runs_through_the_runtime_and_reports_its_exit_code(tmp_path: Path) -> None:
    exits = Exits()
    ex = executor(tmp_path, exits)
    fw = framework_for(job_config({"worker": (1, "echo hello from $PAI_CURRENT_TASK_ROLE_NAME; exit 3")}))
    pid, directory = await ex.start(fw, KEY)
    assert pid > 0
    assert directory == tmp_path / "data" / "jobs" / "job1" / "attempt-0" / "worker-0" / "try-0"
    done = await exits.next()
    assert (done.job_id, done.key, done.exit_code) == ("job1", KEY, 3)
    assert done.failure is not None
    assert done.failure.code != 0
    assert "hello from worker" in (directory / "logs" / "user.pai.stdout").read_text()
    assert ex.probe("job1", KEY).status == "ended"
    await ex.close()


async def test_secrets_reach_the_task_through_a_private_file(tmp_path: Path) -> None:
    exits = Exits()

    async def secrets(job_id: str) -> dict[str, Any]:
        return {"token": f"s3cret-{job_id}"}

    ex = executor(tmp_path, exits, secrets)
    fw = framework_for(job_config({"worker": (1, "test '<% $secrets.token %>' = s3\"\"cret-job1")}))
    _, directory = await ex.start(fw, KEY)
    assert stat.S_IMODE((directory / "secrets.json").stat().st_mode) == 0o600
    assert "s3cret" not in (directory / "spec.json").read_text()
    assert (await exits.next()).exit_code == 0
    assert not (directory / "secrets.json").exists()
    await ex.close()


async def test_stop_terminates_the_whole_process_group(tmp_path: Path) -> None:
    exits = Exits()
    ex = executor(tmp_path, exits, grace=30.0)
    fw = framework_for(job_config({"worker": (1, "sleep 300 & sleep 300; wait")}))
    pid, directory = await ex.start(fw, KEY)
    await wait_for_file(directory / "logs" / "runtime.pai.log", "user command starts")
    await ex.stop("job1", KEY)
    done = await exits.next()
    assert done.exit_code != 0
    assert not lock_is_held(directory)
    await wait_until_group_gone(pid)
    await ex.close()


async def test_a_restarted_executor_adopts_a_live_task_and_reports_its_end(tmp_path: Path) -> None:
    first_exits = Exits()
    first = executor(tmp_path, first_exits)
    fw = framework_for(job_config({"worker": (1, "sleep 1; exit 4")}))
    pid, directory = await first.start(fw, KEY)
    await first.close()  # the orchestrator goes away; the task keeps running
    exits = Exits()
    second = executor(tmp_path, exits)
    probe = second.probe("job1", KEY)
    assert (probe.status, probe.pid) == ("alive", pid)
    second.adopt("job1", KEY, pid, directory)
    done = await exits.next()
    assert done.exit_code == 4
    assert first_exits.queue.empty()
    await second.close()


async def test_probe_tells_a_task_that_never_began(tmp_path: Path) -> None:
    ex = executor(tmp_path, Exits())
    assert ex.probe("job1", KEY).status == "absent"


async def test_the_tasks_of_an_attempt_share_one_build_of_its_placements(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spec holds every task's placement; building them for each task made a job of n tasks
    cost n * n. Each spec still names its own task, its own ports and everyone's."""
    built: list[tuple[str, int]] = []
    build = specs.attempt_peers

    def counting(data_dir: Path, framework: Framework, attempt: int) -> specs.Peers:
        built.append((framework.job_id, attempt))
        return build(data_dir, framework, attempt)

    monkeypatch.setattr(local, "attempt_peers", counting)
    exits = Exits()
    ex = executor(tmp_path, exits)
    fw = framework_for(job_config({"worker": (3, "echo $PAI_HOST_IP_worker_2 $PAI_worker_1_http_PORT")}))
    started = [await ex.start(fw, TaskKey(0, "worker", i, 0)) for i in range(3)]
    ended = sorted([(await exits.next()).exit_code for _ in range(3)])
    assert ended == [0, 0, 0]
    assert built == [("job1", 0)]
    facts = [specs.launch_facts(directory) for _, directory in started]
    assert len({str(ports) for ports, _, _ in facts}) == 3  # each task's own ports
    [(http,)] = [ports["http"] for ports, _, _ in facts[1:2]]
    for _, directory in started:
        spec = json.loads((directory / specs.SPEC_FILE).read_text())
        assert len(spec["tasks"]) == 3
        assert f"{http}" in (directory / "logs" / "user.pai.stdout").read_text()
    assert all(notice and "was not used" in notice for _, notice, _ in facts)
    await ex.close()


async def wait_for_file(path: Path, text: str) -> None:
    for _ in range(600):
        if file_contains(path, text):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared in {path}")


async def wait_until_group_gone(pgid: int) -> None:
    """Members of a killed group may linger a moment as zombies until they are reaped."""
    for _ in range(200):
        alive = [
            p
            for p in psutil.process_iter(["status"])
            if _pgid(p.pid) == pgid and p.info["status"] != "zombie"
        ]
        if not alive:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"processes of group {pgid} still run: {alive}")


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def file_contains(path: Path, text: str) -> bool:
    return path.exists() and text in path.read_text()


@pytest.mark.parametrize("fork_server", [True, False], ids=["fork server", "spawned"])
async def test_a_start_while_another_process_holds_the_lock_raises_and_runs_nothing(
    tmp_path: Path, fork_server: bool
) -> None:
    # Another process took the task's lock and has written neither its pid nor any log yet (an
    # orchestrator that died right after taking it, or a runtime still starting): only the lock
    # says the task runs, and it is enough.
    ex = LocalExecutor(tmp_path / "data", Exits(), no_secrets, poll_seconds=0.05, fork_server=fork_server)
    marker = tmp_path / "ran"
    fw = framework_for(job_config({"worker": (1, f"touch {marker}")}))
    directory = ex.task_dir("job1", KEY)
    directory.mkdir(parents=True)
    holder = os.open(directory / specs.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        assert not local.began(directory)
        with pytest.raises(AlreadyRunningError, match="its process runs"):
            await ex.start(fw, KEY)
        assert not (directory / specs.PID_FILE).exists()
        assert not (directory / specs.SPEC_FILE).exists()
        assert list((directory / "logs").iterdir()) == []
        assert find_runtimes(directory / specs.SPEC_FILE) == []
        assert lock_is_held(directory)  # still the other process's
    finally:
        os.close(holder)
        await ex.close()
    assert not marker.exists()


def _running_with(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if marker in (proc.info["cmdline"] or []) and proc.info["status"] != "zombie":
            found.append(proc)
    return found


async def test_stopping_a_task_that_ignores_sigterm_leaves_none_of_its_processes_without_cgroups(
    tmp_path: Path,
) -> None:
    """No cgroup to empty and no sandbox to tear down: the runtime, the command's group and a
    child that left it (setsid) all end within the grace period's SIGKILL."""
    exits = Exits()
    ex = executor(tmp_path, exits, grace=1.0)
    assert ex.groups.confinement.mechanism == "none"
    assert ex.sandbox is None
    command = "trap '' TERM; sleep 7301 & setsid sleep 7302 & sleep 7303; wait"
    fw = framework_for(job_config({"worker": (1, command)}))
    _, directory = await ex.start(fw, KEY)
    await wait_for_file(directory / "logs" / "runtime.pai.log", "user command starts")
    for marker in ("7301", "7302", "7303"):
        for _ in range(200):
            if _running_with(marker):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"sleep {marker} never started")
    await ex.stop("job1", KEY)
    done = await exits.next()
    assert done.exit_code != 0
    for _ in range(200):
        left = [p for marker in ("7301", "7302", "7303") for p in _running_with(marker)]
        if not left:
            break
        await asyncio.sleep(0.05)
    else:
        for proc in left:
            proc.kill()
        raise AssertionError(f"the stopped task's processes still run: {left}")
    await ex.close()


async def test_a_host_task_that_ends_leaves_nothing_running_without_cgroups(tmp_path: Path) -> None:
    """A pod's processes end with its container: here, with its command, the daemon it left
    (double fork: re-parented to the runtime, not to init) included."""
    exits = Exits()
    ex = executor(tmp_path, exits)
    command = "(setsid sleep 7304 < /dev/null > /dev/null 2>&1 &); echo left it"
    fw = framework_for(job_config({"worker": (1, command)}))
    _, directory = await ex.start(fw, KEY)
    done = await exits.next()
    assert done.exit_code == 0
    assert not _running_with("7304")
    runtime_log = (directory / "logs" / "runtime.pai.log").read_text()
    assert "the task's command left 1 process(es) running: ended with it" in runtime_log
    await ex.close()
