"""Stand-ins for the NVIDIA driver's utilities, put on PATH by a test: they record what they are asked.

``fake_mps_control`` writes an ``nvidia-cuda-mps-control`` that behaves as the real one does
where the platform touches it: ``-d`` forks a daemon (its own session, the caller returns at
once) that serves the CUDA_MPS_PIPE_DIRECTORY it was started with, and a client reading ``quit``
on its standard input makes that daemon end. Each call appends a line to the record file:
``start PIPE LOG`` for a daemon (with its pid), ``quit PIPE`` for a quit. ``fake_nvidia_smi``
answers the queries the platform makes of nvidia-smi (names, use, processes) for N GPUs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

MPS_CONTROL = r"""#!{python}
import os, signal, sys
RECORD = {record!r}
FAIL = {fail!r}
HOLDS_OUTPUT = {holds_output!r}

def note(line):
    with open(RECORD, "a") as f:
        f.write(line + "\n")

pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
log = os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps")
if sys.argv[1:] == ["-d"]:
    if FAIL:
        print("An instance of this daemon is already running", flush=True)
        note("refused " + pipe)
        sys.exit(1)
    if os.fork():  # as the real one: `-d` returns once the daemon runs
        os.wait()
        os._exit(0)
    os.setsid()
    daemon = os.fork()
    if daemon:
        for name in ("nvidia-cuda-mps-control.pid", ".fake-daemon"):  # the real one's, the fake's own
            with open(os.path.join(pipe, name), "w") as f:
                f.write(str(daemon))
        note(f"start {{pipe}} {{log}} {{daemon}}")
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0,) if HOLDS_OUTPUT else (0, 1, 2):  # a daemon may keep what it was given
        os.dup2(devnull, fd)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    while True:
        signal.pause()
elif not sys.argv[1:]:
    for line in sys.stdin:
        if line.strip() == "quit":
            note("quit " + pipe)
            with open(os.path.join(pipe, ".fake-daemon")) as f:
                os.kill(int(f.read()), signal.SIGTERM)
else:
    sys.exit(2)
"""

NVIDIA_SMI = r"""#!/bin/sh
case "$*" in
  *--query-gpu=name*) i=0; while [ $i -lt {count} ]; do echo "NVIDIA Fake"; i=$((i+1)); done ;;
  *--query-gpu=*)
    i=0; while [ $i -lt {count} ]; do echo "$i, GPU-fake-$i, 0, 0, 0, 81920, 0, 0"; i=$((i+1)); done ;;
  *--query-compute-apps=*) ;;
  *) exit 1 ;;
esac
"""


@dataclass
class FakeMps:
    bin_dir: Path
    record: Path

    def lines(self) -> list[str]:
        return self.record.read_text().splitlines() if self.record.exists() else []

    def starts(self) -> list[str]:
        return [line for line in self.lines() if line.startswith("start ")]

    def quits(self) -> list[str]:
        return [line for line in self.lines() if line.startswith("quit ")]


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def fake_mps_control(bin_dir: Path, *, fail: bool = False, holds_output: bool = False) -> FakeMps:
    bin_dir.mkdir(parents=True, exist_ok=True)
    record = bin_dir.parent / "mps-calls.txt"
    text = MPS_CONTROL.format(python=sys.executable, record=str(record), fail=fail, holds_output=holds_output)
    _executable(bin_dir / "nvidia-cuda-mps-control", text)
    return FakeMps(bin_dir, record)


def fake_nvidia_smi(bin_dir: Path, count: int) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    _executable(bin_dir / "nvidia-smi", NVIDIA_SMI.format(count=count))
