"""A service stops on SIGTERM by finishing its work and exits with status 0."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SERVICE = """
import asyncio
from libs.backbone.running import run_service

async def main(stop: asyncio.Event) -> None:
    print("ready", flush=True)
    await stop.wait()
    await asyncio.sleep(0)  # in-flight work finishing
    print("drained", flush=True)

run_service(main)
"""


def run_and_signal(sig: signal.Signals) -> tuple[int, str]:
    with subprocess.Popen(
        [sys.executable, "-c", SERVICE], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        process.send_signal(sig)
        out, _err = process.communicate(timeout=30)
        return process.returncode, out


def test_sigterm_lets_main_finish_and_the_process_exits_zero() -> None:
    status, out = run_and_signal(signal.SIGTERM)
    assert status == 0
    assert "drained" in out.splitlines()


def test_sigint_is_handled_the_same_way() -> None:
    status, out = run_and_signal(signal.SIGINT)
    assert status == 0
    assert "drained" in out.splitlines()
