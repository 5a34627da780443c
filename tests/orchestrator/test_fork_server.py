"""Task runtimes forked from a warm one (runtime/forkserver.py), and what happens when it is gone."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import psutil

from services.orchestrator.adapters.forking import FORK_SERVER_MODULE, ForkServer, ForkServerLost
from services.orchestrator.adapters.isolation import task_environment
from services.orchestrator.adapters.local import FORK_SERVER_STARTS, LocalExecutor, lock_is_held, runtime_path
from services.orchestrator.adapters.specs import PID_FILE
from services.orchestrator.core.frameworks import TaskKey
from tests.orchestrator.jobs import job_config
from tests.orchestrator.test_local_executor import KEY, Exits, framework_for, no_secrets
from tests.support.waiting import eventually, polled


def executor(tmp_path: Path, exits: Exits, *, fork_server: bool = True) -> LocalExecutor:
    return LocalExecutor(tmp_path / "data", exits, no_secrets, poll_seconds=0.05, fork_server=fork_server)


def parent_command(pid: int) -> list[str]:
    parent = psutil.Process(pid).parent()
    assert parent is not None
    return parent.cmdline()


def fork_server_of(ex: LocalExecutor) -> psutil.Process:
    servers = [c for c in psutil.Process().children() if FORK_SERVER_MODULE in c.cmdline()]
    data_dir = str(ex.data_dir)
    (server,) = [s for s in servers if data_dir in s.cmdline()]
    return server


async def test_a_forked_runtime_runs_the_task_in_its_own_session_and_reports_its_exit(tmp_path: Path) -> None:
    exits = Exits()
    ex = executor(tmp_path, exits)
    fw = framework_for(job_config({"worker": (1, "echo forked $PAI_CURRENT_TASK_ROLE_NAME; sleep 30")}))
    pid, directory = await ex.start(fw, KEY)
    try:
        assert FORK_SERVER_MODULE in parent_command(pid)  # forked, not a new interpreter
        assert os.getsid(pid) == pid  # its own session, as a spawned runtime: it outlives its parent
        assert lock_is_held(directory)
        os.killpg(pid, signal.SIGKILL)
        done = await exits.next()
        # The server reaped it and said how it ended: the kill, not a made-up code.
        assert (done.key, done.exit_code) == (KEY, 137)
        assert "ended with 137 without writing a result" in done.diagnostics
    finally:
        await ex.close()


async def test_forty_quick_tasks_each_start_once_and_each_end_is_reported(tmp_path: Path) -> None:
    exits = Exits()
    ex = executor(tmp_path, exits)
    fw = framework_for(job_config({"worker": (40, "exit $PAI_TASK_INDEX")}))
    keys = [TaskKey(0, "worker", i, 0) for i in range(40)]
    started = await asyncio.gather(*(ex.start(fw, key) for key in keys))
    ended = {(await exits.next()).key: None for _ in keys}
    codes = {key[2]: ex.exit_of("job1", key).exit_code for key in keys}
    assert set(ended) == set(keys)
    assert codes == {i: i for i in range(40)}
    assert len({pid for pid, _ in started}) == 40
    server = fork_server_of(ex)
    await ex.close()
    assert not server.is_running()  # it ends with its executor


async def test_without_the_fork_server_the_runtime_is_a_new_interpreter(tmp_path: Path) -> None:
    exits = Exits()
    ex = executor(tmp_path, exits, fork_server=False)
    fw = framework_for(job_config({"worker": (1, "sleep 30")}))
    pid, _ = await ex.start(fw, KEY)
    try:
        assert psutil.Process(pid).ppid() == os.getpid()
        # Between its fork and its exec the child's argv is still this process's; the exec has
        # no event to await, so its argv is looked at until it changes (or 10 s).
        deadline = asyncio.get_running_loop().time() + 10
        while "--spec" not in (argv := psutil.Process(pid).cmdline()):
            if asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.01)
        assert "--spec" in argv
        os.killpg(pid, signal.SIGKILL)
        assert (await exits.next()).exit_code == 137
    finally:
        await ex.close()


async def test_a_task_outlives_a_killed_fork_server_and_its_end_is_still_reported(tmp_path: Path) -> None:
    exits = Exits()
    ex = executor(tmp_path, exits)
    fw = framework_for(job_config({"worker": (2, "sleep 30")}))
    first = TaskKey(0, "worker", 0, 0)
    pid, directory = await ex.start(fw, first)
    server = fork_server_of(ex)
    server.kill()
    server.wait(10)
    assert psutil.Process(pid).is_running()  # the task goes on without its parent
    # The next task starts all the same: a new server forks it.
    second = TaskKey(0, "worker", 1, 0)
    other, _ = await ex.start(fw, second)
    assert FORK_SERVER_MODULE in parent_command(other)
    assert fork_server_of(ex).pid != server.pid
    assert lock_is_held(directory)
    os.killpg(pid, signal.SIGTERM)
    ended = await exits.next()
    # Watched by its lock now that its parent is gone: reported once, from its result file.
    assert ended.key == first
    assert ended.exit_code == 143  # the runtime's own result: SIGTERM passed on to the command
    os.killpg(other, signal.SIGKILL)
    assert (await exits.next()).key == second
    await ex.close()


async def test_a_forked_task_whose_pid_was_not_recorded_is_found_by_its_lock(tmp_path: Path) -> None:
    """The orchestrator died between the fork and writing the pid: the next one finds it by its title."""
    exits = Exits()
    spaced = tmp_path / "a data dir"  # its title, read back, may be split at every space
    ex = executor(spaced, exits)
    fw = framework_for(job_config({"worker": (1, "sleep 30")}))
    pid, directory = await ex.start(fw, KEY)
    try:
        (directory / PID_FILE).unlink()
        probe = LocalExecutor(spaced / "data", exits, no_secrets, fork_server=False).probe("job1", KEY)
        assert (probe.status, probe.pid) == ("alive", pid)
    finally:
        os.killpg(pid, signal.SIGKILL)
        await exits.next()
        await ex.close()


async def test_requests_waiting_for_a_full_socket_fail_when_the_server_is_lost(tmp_path: Path) -> None:
    """A stopped server stops reading; once its socket is full, requests wait to be sent. When
    the server dies, each of them fails at once (the executor then starts the task itself)."""
    server = ForkServer(task_environment(os.environ, PYTHONPATH=runtime_path()), tmp_path)
    await server.start()
    assert server.pid is not None
    os.kill(server.pid, signal.SIGSTOP)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        requests = [
            asyncio.ensure_future(server.spawn(tmp_path / f"spec-{i}.json", tmp_path, null, null))
            for i in range(5000)
        ]
        # Some sent (each then awaits its reply), the rest waiting for room in the socket.
        await eventually(polled(lambda: len(server._replies)), lambda sent: 0 < sent < len(requests))
        os.kill(server.pid, signal.SIGKILL)
        outcomes = await asyncio.wait_for(asyncio.gather(*requests, return_exceptions=True), 30)
        assert all(isinstance(outcome, ForkServerLost) for outcome in outcomes)
    finally:
        os.close(null)
        await server.close()


async def test_servers_killed_after_forking_are_replaced_every_time(tmp_path: Path) -> None:
    """The budget of server starts is for servers that fork nothing (they cannot start): one that
    forked a task and was killed later is replaced however often that happens."""
    exits = Exits()
    ex = executor(tmp_path, exits)
    rounds = FORK_SERVER_STARTS + 2
    fw = framework_for(job_config({"worker": (1, "exit 0")}))
    servers = set()
    try:
        for retry in range(rounds):  # one task tried again and again, each time forked
            await ex.start(fw, TaskKey(0, "worker", 0, retry))
            assert (await exits.next()).exit_code == 0
            server = fork_server_of(ex)
            servers.add(server.pid)
            server.kill()
            server.wait(10)
        assert len(servers) == rounds  # each task forked by a server of its own, none spawned
    finally:
        await ex.close()
