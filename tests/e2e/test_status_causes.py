"""`pai job status` says why each failed task ended: its exit diagnostics, as the detail has them.

A task past its memoryMB ends with OpenPAI's -1200; the status and the last line of the task's
log name the limit and the peak, where before only the REST answer (containerExitDiagnostics)
did and the log ended with the kernel's "Killed".
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.platform import ADMIN_PASSWORD, Cli, job_yaml, running_platform

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(os.geteuid() != 0, reason="a memory limit needs the cgroups of a root platform"),
]

HOG = "python3 -c 'held = bytearray(400 * 1024 * 1024); print(len(held))'"


async def test_pai_job_status_prints_each_failed_tasks_cause(tmp_path: Path) -> None:
    async with running_platform(tmp_path / "data") as platform:
        job_id = await platform.submit(job_yaml("hog", {"main": {"commands": [HOG]}}))
        assert (await platform.completed(job_id)).state == "FAILED"
        cli = Cli(platform.info.api_url, tmp_path / "config")
        code, _, err = await cli.run("login", "--user", "admin", env={"PAI_PASSWORD": ADMIN_PASSWORD})
        assert code == 0, err
        code, out, err = await cli.run("job", "status", "hog")
        assert code == 0, err
        [cause] = [line for line in out.splitlines() if line.startswith("cause")]
        assert "main[0]: the task went past its memory limit of 128 MiB" in cause, out
        assert "peak" in cause, out
        # The task's own log ends with the same cause, after the command's "Killed".
        last = (await platform.log("hog", "main", 0)).strip().splitlines()[-1]
        assert last.startswith("[pai] the task went past its memory limit of 128 MiB"), last
        assert "peak" in last, last
