"""The node's NVIDIA MPS control daemon, against a fake `nvidia-cuda-mps-control` that records its calls.

Started once per node where GPUs are found, started again when it dies, adopted by a later
platform on the same data dir, asked to quit when the platform stops; where it cannot run,
shares are advisory and the platform says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from libs.protocol import gpu_enforcement, simulated_gpus
from pai.cli.main import app
from pai.embedded import mps
from pai.embedded.mps import NodeMps
from tests.support.fake_nvidia import FakeMps, fake_mps_control

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeMps]:
    made = fake_mps_control(tmp_path / "bin")
    yield made
    for line in made.starts():  # no daemon outlives its test
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split()[-1]), signal.SIGKILL)


def node(tmp_path: Path, fake: FakeMps, gpus: int = 2, **environ: str) -> NodeMps:
    path = f"{fake.bin_dir}{os.pathsep}{os.environ['PATH']}"
    return NodeMps(tmp_path / "data", {"PATH": path, **environ}, gpu_count=lambda: gpus)


def alive(pid: int | None) -> bool:
    try:
        return pid is not None and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize(
    ("setting", "gpus", "simulated", "control", "expected"),
    [
        ("auto", 2, None, "/usr/bin/nvidia-cuda-mps-control", None),
        ("off", 2, None, "/usr/bin/nvidia-cuda-mps-control", "PAI_GPU_MPS=off"),
        ("auto", 0, simulated_gpus.parse("2:V100"), "/usr/bin/nvidia-cuda-mps-control", "simulated"),
        ("auto", 0, None, "/usr/bin/nvidia-cuda-mps-control", "no NVIDIA GPU"),
        ("auto", 2, None, None, "nvidia-cuda-mps-control was not found"),
    ],
    ids=["gpus and the binary: started", "turned off", "simulated gpus", "no gpu", "no binary"],
)
def test_the_daemon_runs_only_where_there_are_real_gpus_and_the_binary(
    setting: str,
    gpus: int,
    simulated: simulated_gpus.SimulatedGpus | None,
    control: str | None,
    expected: str | None,
) -> None:
    why = mps.why_not(setting, gpus, simulated, control)
    assert why is None if expected is None else expected in (why or "")


def test_the_setting_is_auto_or_off() -> None:
    assert mps.setting_of({}) == "auto"
    assert mps.setting_of({"PAI_GPU_MPS": "OFF"}) == "off"
    with pytest.raises(ValueError, match=r"auto .* or off"):
        mps.setting_of({"PAI_GPU_MPS": "yes"})


async def test_the_daemon_is_started_once_with_its_own_dirs_restarted_when_it_dies_and_quit_on_stop(
    tmp_path: Path, fake: FakeMps
) -> None:
    mps_node = node(tmp_path, fake)
    enforcement = await mps_node.start()
    pipe, log = tmp_path / "data" / "mps" / "pipe", tmp_path / "data" / "mps" / "log"
    try:
        assert enforcement.enforced, enforcement
        assert "NVIDIA MPS" in enforcement.reason
        [started] = fake.starts()
        assert started.split()[1:3] == [str(pipe), str(log)]
        daemon = mps_node.daemon
        assert daemon is not None
        first = daemon.pid
        assert first == int(started.split()[-1])
        assert oct(pipe.stat().st_mode & 0o777) == "0o755"  # task users reach the pipes
        assert oct(pipe.parent.stat().st_mode & 0o777) == "0o711"
        env = mps_node.service_environment()
        assert env[mps.PIPE_ENV] == str(pipe)
        assert gpu_enforcement.parse(env[gpu_enforcement.ENV]) == enforcement

        os.kill(first, signal.SIGKILL)  # the daemon dies: the platform starts it again
        await asyncio.wait_for(daemon.wait_started(2), 30)
        assert len(fake.starts()) == 2
        second = daemon.pid
        assert second != first
        assert alive(second)
        assert daemon.restarts == 1
    finally:
        await mps_node.stop()
    assert fake.quits() == [f"quit {pipe}"]
    assert not alive(second)


@pytest.mark.parametrize("pid_file", [True, False], ids=["by its pid file", "by its command and pipe"])
async def test_a_platform_started_again_adopts_the_daemon_left_running(
    tmp_path: Path, fake: FakeMps, pid_file: bool
) -> None:
    first = node(tmp_path, fake)
    await first.start()  # then the platform is killed: nothing stops the daemon
    assert first.daemon is not None
    pid = first.daemon.pid
    if not pid_file:
        (first.pipe_dir / mps.PID_FILE).unlink()
    again = node(tmp_path, fake)
    assert (await again.start()).enforced
    assert again.daemon is not None
    assert again.daemon.pid == pid
    assert len(fake.starts()) == 1
    await again.stop()
    assert len(fake.quits()) == 1
    assert not alive(pid)


async def test_a_stop_while_tasks_still_run_leaves_the_daemon_to_them(tmp_path: Path, fake: FakeMps) -> None:
    mps_node = NodeMps(
        tmp_path / "data",
        {"PATH": f"{fake.bin_dir}{os.pathsep}{os.environ['PATH']}"},
        gpu_count=lambda: 1,
        in_use=lambda: True,
    )
    await mps_node.start()
    assert mps_node.daemon is not None
    pid = mps_node.daemon.pid
    await mps_node.stop()
    assert fake.quits() == []
    assert alive(pid)


async def test_with_simulated_gpus_shares_are_advisory_and_no_daemon_is_asked_for(
    tmp_path: Path, fake: FakeMps
) -> None:
    mps_node = node(tmp_path, fake, gpus=0, PAI_SIMULATED_GPUS="2:V100")
    enforcement = await mps_node.start()
    assert not enforcement.enforced
    assert "simulated (pai up --gpus 2:V100)" in enforcement.reason
    assert fake.lines() == []
    env = mps_node.service_environment()
    assert mps.PIPE_ENV not in env
    assert env[gpu_enforcement.ENV].startswith("advisory: the GPUs are simulated")
    await mps_node.stop()


async def test_turned_off_no_daemon_is_asked_for_even_with_gpus(tmp_path: Path, fake: FakeMps) -> None:
    enforcement = await node(tmp_path, fake, PAI_GPU_MPS="off").start()
    assert not enforcement.enforced
    assert "PAI_GPU_MPS=off" in enforcement.reason
    assert fake.lines() == []


async def test_without_the_binary_shares_are_advisory_and_say_so(tmp_path: Path) -> None:
    mps_node = NodeMps(tmp_path / "data", {"PATH": str(tmp_path / "empty")}, gpu_count=lambda: 1)
    enforcement = await mps_node.start()
    assert not enforcement.enforced
    assert "nvidia-cuda-mps-control was not found on PATH" in enforcement.reason


async def test_a_daemon_that_will_not_start_leaves_shares_advisory_with_its_words(tmp_path: Path) -> None:
    refusing = fake_mps_control(tmp_path / "bin", fail=True)
    enforcement = await node(tmp_path, refusing).start()
    assert not enforcement.enforced
    assert "did not start" in enforcement.reason
    assert "An instance of this daemon is already running" in enforcement.reason
    assert refusing.lines() == [f"refused {tmp_path / 'data' / 'mps' / 'pipe'}"]


def test_pai_up_refuses_an_unknown_setting_before_starting_anything(tmp_path: Path) -> None:
    done = CliRunner().invoke(app, ["up", "--data-dir", str(tmp_path / "data")], env={"PAI_GPU_MPS": "yes"})
    assert done.exit_code == 2, done.output
    assert "PAI_GPU_MPS='yes': expected auto" in done.output
    assert not (tmp_path / "data").exists()


async def test_a_daemon_keeping_the_output_it_was_given_does_not_hold_up_the_start(tmp_path: Path) -> None:
    keeping = fake_mps_control(tmp_path / "bin", holds_output=True)
    mps_node = node(tmp_path, keeping)
    try:
        enforcement = await asyncio.wait_for(mps_node.start(), 10)  # well before START_TIMEOUT
        assert enforcement.enforced, enforcement
    finally:
        await mps_node.stop()
        for line in keeping.starts():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split()[-1]), signal.SIGKILL)
    assert len(keeping.quits()) == 1
