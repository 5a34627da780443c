"""A short run of the production topology under chaos: three clustered nats-servers, PostgreSQL,
two replicas of the services; every NATS server, every replica and both leaders killed once, one
NATS server frozen for 15 s, the scheduler leader frozen past its lease.

The full harness is bench/cluster_chaos.py (200 jobs, 2 rounds; bench/RESULTS.md).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench.cluster_chaos import DEFAULT_REPLICAS, NATS_NODES, PG_ADMIN_DSN, print_report, run

# A guard only: about 2-3 minutes on two shared cores; the settle time bounds a stuck run.
pytestmark = pytest.mark.timeout(600)


def postgres_available() -> bool:
    import asyncpg  # type: ignore[import-untyped]  # asyncpg ships no type hints

    async def probe() -> bool:
        try:
            conn = await asyncpg.connect(PG_ADMIN_DSN, timeout=2)
        except (OSError, asyncpg.PostgresError, TimeoutError):
            return False
        await conn.close()
        return True

    return asyncio.run(probe())


async def test_losing_nats_servers_replicas_and_leaders_loses_no_job_and_places_nothing_twice(
    tmp_path: Path,
) -> None:
    if not await asyncio.to_thread(postgres_available):
        pytest.skip("no PostgreSQL at 127.0.0.1:5432")
    report = await run(
        jobs=40,
        rounds=1,
        work=1.0,
        seed=11,
        root=tmp_path,
        replicas=dict(DEFAULT_REPLICAS),
        partition=15.0,
        settle=240.0,
    )
    print_report(report)
    assert report.stream_replicas == NATS_NODES
    killed = {name.split(" ")[0] for name in report.killed}
    assert {f"nats-{i}" for i in range(NATS_NODES)} <= killed
    assert {"scheduler-0", "scheduler-1", "orchestrator-0", "orchestrator-1", "rest-0", "rest-1"} <= killed
    assert any("(leader)" in name for name in report.killed if name.startswith("scheduler-"))
    assert [p["seconds"] >= 15 for p in report.partitions] == [True]
    assert report.accepted == 40
    assert report.lost == []
    assert report.stuck == []
    assert report.twice == {}
    assert report.double_allocations == 0
    assert report.final == 40
    assert report.probes_final == report.probes
    # A lost server, replica or leader is no reason for a job to fail (the report says why not).
    assert report.unsuccessful == {}
    failovers = [f["seconds"] for f in report.failovers]
    assert failovers, "no scheduler leader was lost"
    # The bench records under 10 s (bench/RESULTS.md); a shared CI machine gets some headroom.
    assert all(seconds is not None and seconds < 15 for seconds in failovers), report.failovers
    assert report.api_unavailable_s < 5
