"""The supervisor restarts the bus like any child (and once a full disk that wedged it has room
again) and stops everything together."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest
import structlog

from libs.backbone.connecting import connect
from libs.backbone.natsserver import EmbeddedNats
from libs.backbone.provisioning import StreamSpec, ensure_stream
from pai.embedded.reviving import ROOM_BYTES, SpaceWatch, room_needed
from pai.embedded.supervising import Child, NatsChild, Supervisor
from tests.support.waiting import eventually, polled


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return False


async def test_a_killed_bus_is_reaped_and_back_on_its_port_with_its_streams(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "nats")
    nats_child = NatsChild(server)
    supervisor = Supervisor([nats_child])
    await supervisor.start()
    try:
        port = server.port
        bus = await connect(server.url, initial_timeout=5)
        await ensure_stream(bus.js, StreamSpec(name="KEEP", subjects=("keep.>",)))
        old_pid = nats_child.pid
        assert old_pid is not None

        os.kill(old_pid, signal.SIGKILL)
        new_pid = await eventually(polled(lambda: nats_child.pid), lambda pid: pid not in (None, old_pid))

        assert not _zombie(old_pid)
        assert server.port == port
        assert new_pid is not None
        assert nats_child.restarts == 1
        await eventually(polled(lambda: bus.is_connected), bool)
        info = await bus.js.stream_info("KEEP")
        assert info.config.subjects == ["keep.>"]
        await bus.close()
    finally:
        await supervisor.stop()
    assert not server.is_running


async def test_stop_terms_every_service_together_and_kills_one_that_ignores_it(tmp_path: Path) -> None:
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('up', flush=True); time.sleep(60)"
    )
    children = [
        Child(f"svc{i}", [sys.executable, "-c", stubborn], {}, tmp_path / f"svc{i}.log") for i in range(3)
    ]
    supervisor = Supervisor(children, grace=0.5)
    await supervisor.start()
    for child in children:
        log_path = child.log_path
        await eventually(polled(log_path.read_text), lambda text: "up" in text)
    pids = list(supervisor.pids().values())
    assert len(pids) == 3
    await supervisor.stop()
    # Together: the three share one grace period; each was killed after ignoring SIGTERM.
    assert all(c.process is not None and c.process.returncode == -signal.SIGKILL for c in children)
    assert supervisor.pids() == {}


class Disk:
    """The bus store's filesystem as a SpaceWatch sees it: free and total bytes, set by the test."""

    def __init__(self, free: int, total: int = 1 << 30) -> None:
        self.free = free
        self.total = total

    def __call__(self, _path: Path) -> tuple[int, int]:
        return self.free, self.total


ENOSPC_LINE = (
    "[7] 2026/01/01 00:00:00.000000 [ERR] JetStream failed to store a msg on stream '$G > PAI_JOBS': "
    "write .../msgs/1.blk: no space left on device\n"
)
DISABLED_LINE = "[7] 2026/01/01 00:00:00.000000 [ERR] JetStream out of File resources, will be DISABLED\n"
PLENTY, FULL = 1 << 30, 0


@pytest.mark.parametrize(
    ("logged", "free_then", "free_now", "restart"),
    [
        pytest.param("", PLENTY, PLENTY, False, id="nothing-logged-and-room-is-no-reason"),
        pytest.param(ENOSPC_LINE, FULL, FULL, False, id="a-write-met-enospc-but-there-is-no-room-yet"),
        pytest.param(ENOSPC_LINE, FULL, PLENTY, True, id="a-write-met-enospc-and-there-is-room-again"),
        pytest.param(ENOSPC_LINE, PLENTY, PLENTY, True, id="enospc-logged-after-space-was-freed"),
        pytest.param(DISABLED_LINE, PLENTY, PLENTY, True, id="jetstream-disabled-and-room"),
        pytest.param("", FULL, PLENTY, True, id="the-disk-seen-full-though-its-log-line-was-lost"),
        pytest.param("", 4 << 20, PLENTY, False, id="nearly-full-is-not-full"),
        pytest.param("", FULL, 8 << 20, False, id="a-few-megabytes-back-are-not-room"),
    ],
)
def test_the_bus_is_restarted_once_it_met_a_full_disk_and_there_is_room_again(
    tmp_path: Path, logged: str, free_then: int, free_now: int, restart: bool
) -> None:
    log_path = tmp_path / "nats-server.log"
    log_path.write_text("[7] earlier server: no space left on device\n")  # before this server
    disk = Disk(free_then)
    watch = SpaceWatch(tmp_path, log_path, usage=disk)
    watch.started()
    with log_path.open("a") as log:
        log.write("[7] Server is ready\n" + logged)
    seen = watch.restart_because()
    disk.free = free_now
    reason = seen or watch.restart_because()
    assert (reason is not None) == restart, reason
    if logged and restart:
        assert reason == logged.strip()


def test_a_restarted_bus_starts_with_no_trouble_and_a_line_half_written_is_read_whole(tmp_path: Path) -> None:
    log_path = tmp_path / "nats-server.log"
    disk = Disk(PLENTY)
    watch = SpaceWatch(tmp_path, log_path, usage=disk)
    watch.started()
    half, rest = ENOSPC_LINE[:60], ENOSPC_LINE[60:]
    log_path.write_text(half)
    assert watch.restart_because() is None
    with log_path.open("a") as log:
        log.write(rest)
    assert watch.restart_because() == ENOSPC_LINE.strip()
    watch.started()
    assert watch.trouble is None
    assert watch.restart_because() is None


@pytest.mark.parametrize(
    ("total", "needed"),
    [(300 << 20, 30 << 20), (1 << 40, ROOM_BYTES), (4 << 20, 2 << 20)],
    ids=["a-300-mb-filesystem-needs-a-tenth", "a-large-one-needs-64-mb", "a-tiny-one-needs-2-mb"],
)
def test_room_is_64_mb_or_a_tenth_of_a_smaller_filesystem(total: int, needed: int) -> None:
    assert room_needed(total) == needed


async def test_a_bus_wedged_by_a_full_disk_is_restarted_by_the_supervisor_with_its_streams(
    tmp_path: Path,
) -> None:
    server = EmbeddedNats(tmp_path / "nats")
    disk = Disk(PLENTY)
    watch = SpaceWatch(server.store_dir, server.log_path, usage=disk)
    nats_child = NatsChild(server, space=watch, check_every=0.05)
    supervisor = Supervisor([nats_child])
    await supervisor.start()
    try:
        bus = await connect(server.url, initial_timeout=5)
        await ensure_stream(bus.js, StreamSpec(name="KEEP", subjects=("keep.>",)))
        await bus.js.publish("keep.one", b"1")
        old_pid = nats_child.pid
        disk.free = FULL
        await eventually(polled(lambda: watch.trouble), bool)
        assert nats_child.pid == old_pid, "no restart while the disk is full"
        disk.free = PLENTY
        new_pid = await eventually(polled(lambda: nats_child.pid), lambda pid: pid not in (None, old_pid))
        assert new_pid is not None
        assert (nats_child.revivals, nats_child.restarts) == (1, 1)
        await eventually(polled(lambda: bus.is_connected), bool)
        info = await bus.js.stream_info("KEEP")
        assert info.state.messages == 1
        assert watch.trouble is None, "the new server starts with no trouble"
        await bus.close()
    finally:
        await supervisor.stop()
    assert not server.is_running


class _Flaky:
    """A child whose starts fail as the test scripts them (an exception to raise, or None: up)."""

    def __init__(self, starts: list[BaseException | None]) -> None:
        self.name, self.restarts, self.first_delay, self.max_delay = "flaky", 0, 0.0, 0.0
        self.starts = starts
        self.tried = 0
        self.running = asyncio.Event()
        self.exited = asyncio.Event()
        self.back = asyncio.Event()  # up again after a restart

    @property
    def pid(self) -> int | None:
        return 1 if self.running.is_set() else None

    async def start(self) -> None:
        self.tried += 1
        outcome = self.starts.pop(0) if self.starts else None
        if outcome is not None:
            raise outcome
        self.exited.clear()
        self.running.set()
        if self.tried > 1:
            self.back.set()

    async def wait(self) -> int:
        await self.exited.wait()
        self.running.clear()
        return 1

    async def stop(self, grace: float) -> None:
        self.exited.set()

    def kill(self) -> None:
        self.exited.set()


async def test_a_start_that_fails_as_a_start_does_is_tried_again_like_a_crash() -> None:
    child = _Flaky([None, OSError("no such file"), TimeoutError(), None])
    supervisor = Supervisor([child])
    await supervisor.start()
    child.exited.set()  # it crashes once: two failed starts, then it is up again
    await asyncio.wait_for(child.back.wait(), 5)
    assert (child.tried, child.restarts) == (4, 3)
    await supervisor.stop()


async def test_a_bug_in_a_start_is_not_retried_and_its_traceback_is_logged() -> None:
    child = _Flaky([None, ValueError("a bug")])
    supervisor = Supervisor([child])
    await supervisor.start()
    with structlog.testing.capture_logs() as logs:
        child.exited.set()
        watcher = supervisor._watchers[0]
        with pytest.raises(ValueError, match="a bug"):
            await asyncio.wait_for(watcher, 5)
    assert child.tried == 2
    failed = [entry for entry in logs if entry["event"] == "a service's watch failed"]
    assert len(failed) == 1, logs
    assert isinstance(failed[0]["exc_info"], ValueError), logs
    await supervisor.stop()
