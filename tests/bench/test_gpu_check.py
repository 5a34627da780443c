"""bench/gpu_check.py, the check run on a real NVIDIA machine: what it does where there is none,
and its whole course against a fake driver, a fake MPS and a fake PyTorch (jobs, logs, verdict)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fake_nvidia import fake_mps_control, fake_nvidia_smi
from tests.support.fake_torch import fake_torch

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "gpu_check.py"


def run(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",  # not the repository: the script finds its own way
        env={key: value for key, value in env.items() if key != "PYTHONPATH"} | {"PYTHONNOUSERSITE": "1"},
        check=False,
    )


def test_without_an_nvidia_gpu_nothing_is_checked_and_it_exits_0(tmp_path: Path) -> None:
    done = run({**os.environ, "PATH": str(tmp_path)})  # no nvidia-smi; NVML finds no driver here
    assert (done.returncode, done.stdout) == (0, "no NVIDIA GPU: nothing checked\n"), done.stderr


def test_with_a_gpu_but_no_pytorch_it_says_so(tmp_path: Path) -> None:
    fake_nvidia_smi(tmp_path / "bin", 1)
    done = run({**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"no PyTorch in {sys.executable}: nothing checked"), done.stdout


@pytest.mark.timeout(300)
def test_the_whole_check_runs_its_three_jobs_and_prints_one_json_line(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    fake_nvidia_smi(bin_dir, 1)
    mps = fake_mps_control(bin_dir)
    torch_dir = fake_torch(tmp_path / "site")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    # The fake torch is found by the check and by its tasks (their PYTHONPATH is the platform's).
    env["PYTHONPATH"] = str(torch_dir)
    try:
        done = subprocess.run(
            [sys.executable, str(SCRIPT), "--measure-s", "0.5"],
            capture_output=True,
            text=True,
            timeout=280,
            cwd="/",
            env=env,
            check=False,
        )
    finally:
        for line in mps.starts():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split()[-1]), 9)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout + done.stderr[-3000:]
    summary = json.loads(lines[0])
    assert summary["jobs"] == {"whole": "SUCCEEDED", "shared": "SUCCEEDED", "ddp": "SUCCEEDED"}, summary
    assert summary["gpus"] == ["NVIDIA Fake"]
    assert summary["gpu_model"] == "NVIDIA Fake"
    assert summary["gpu_share_enforced"] is True
    assert summary["shared_detail_gpu_share_enforced"] is True
    assert len(summary["tflops_shared"]) == 2
    assert summary["tflops_alone"] > 0
    assert summary["over_cap_refused"] == [True, True]
    assert all("out of memory" in error for error in summary["over_cap_errors"])
    assert summary["shared_devices"] == ["0", "0"]
    pipe = summary["shared_mps_pipe"][0]
    assert pipe.endswith("/mps/pipe")
    assert summary["shared_mps_pipe"] == [pipe, pipe]
    assert summary["train_steps"] == 300
    assert summary["loss_last"] < summary["loss_first"]
    assert summary["checks"]["over_cap_refused"]
    assert summary["checks"]["loss_fell"]
    assert summary["checks"]["all_succeeded"]
    # A fake device has no speed to share: the one check a fake cannot pass, so not ok.
    assert summary["ok"] is (summary["checks"]["shares_35_to_65_percent"])
    assert done.returncode == (0 if summary["ok"] else 1)
    assert len(mps.starts()) == 1
    assert len(mps.quits()) == 1
