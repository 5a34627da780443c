"""A short chaos run: every platform process, nats-server included, killed once while 60 jobs run.

The full harness is bench/chaos_bench.py (`make bench ARGS="chaos"`, 1,000 jobs, 3 rounds).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos_bench import print_report, run
from pai.embedded.platform import SERVICES

# A guard only: the run takes 40-100 s on two shared cores; the settle time bounds a stuck one.
pytestmark = pytest.mark.timeout(420)


async def test_killing_every_process_once_loses_no_job_and_runs_no_task_twice(tmp_path: Path) -> None:
    report = await run(
        jobs=60, rounds=1, work=1.0, seed=7, concurrency=4, settle=180.0, data_dir=tmp_path / "data"
    )
    print_report(report)
    assert sorted(k.process for k in report.kills) == sorted(("nats", *SERVICES))
    assert all(k.api_back is not None for k in report.kills)
    assert report.accepted == 60
    assert report.lost == []
    assert report.stuck == []
    assert report.twice == {}
    # A bus outage is no reason for a job to fail: every job succeeds (the report says why not).
    assert report.unsuccessful == {}
    assert report.by_state == {"SUCCEEDED": 60}
    assert report.executions >= 120
