"""One `pai up` per data dir: a second one is refused naming the first, and none outlives its own.

The attack replayed: a second `pai up` on the same data dir would start a second bus on the
same store and a second REST on the same database; a `pai up` killed with SIGKILL would leave
its bus and services running as orphans beside the next one.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from tests.e2e.up_process import CLI, REPO, UpProcess, gone
from tests.support.waiting import eventually, polled

pytestmark = pytest.mark.timeout(240)


async def test_a_second_up_is_refused_naming_the_first_and_kill_9_of_up_leaves_no_children(
    tmp_path: Path,
) -> None:
    first = UpProcess(tmp_path / "data").start()
    try:
        await first.wait_until_up()
        assert first.process is not None
        second = await asyncio.to_thread(
            subprocess.run,
            [*CLI, "up", "--data-dir", str(tmp_path / "data")],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            timeout=60,
        )
        assert second.returncode == 1
        assert f"pid {first.process.pid}" in second.stderr
        assert f"API http://127.0.0.1:{first.port}" in second.stderr
        assert "--data-dir" in second.stderr  # the way out
        assert first.process.poll() is None, "the first one runs on untouched"

        children = first.descendants()
        assert len(children) >= 6  # the bus and five services
        first.process.kill()
        first.process.wait()
        # The kernel signals every child of the killed `pai up` (parent-death signal).
        await eventually(polled(lambda: gone(children)), bool, within=10)
    finally:
        first.cleanup()
