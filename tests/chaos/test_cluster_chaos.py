"""A short run of the production topology under chaos: three clustered nats-servers, PostgreSQL,
two replicas of every service; every NATS server, every replica and the leaders of the scheduler,
the orchestrator, the monitor and the alerter killed once, one NATS server frozen for 15 s, the
scheduler leader frozen past its lease. No job lost, stuck or run twice, no GPU held twice, no
job notification sent twice or missed, no node counted twice by the monitors.

The full harness is bench/cluster_chaos.py (200 jobs, 2 rounds; bench/RESULTS.md).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench.cluster_chaos import DEFAULT_REPLICAS, NATS_NODES, PG_ADMIN_DSN, print_report, run

pytestmark = [
    # A guard only: a few minutes on two shared cores; the settle time bounds a stuck run.
    pytest.mark.timeout(600),
    # The bench's own NATS client loses every server in turn; a connection to a killed server it
    # closed without waiting may be collected before its transport is (reported, not failed).
    pytest.mark.filterwarnings(
        "default:Exception ignored in. <function StreamWriter.__del__:pytest.PytestUnraisableExceptionWarning"
    ),
]


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
        pause=(0.3, 1.0),  # shorter than the bench's: every replica of eight services goes once
    )
    print_report(report)
    assert report.stream_replicas == NATS_NODES
    killed = {name.split(" ")[0] for name in report.killed}
    assert {f"nats-{i}" for i in range(NATS_NODES)} <= killed
    assert {f"{service}-{i}" for service in DEFAULT_REPLICAS for i in range(2)} <= killed
    for service in ("scheduler", "orchestrator", "monitor", "alerter"):
        assert any(name.startswith(f"{service}-") and "(leader)" in name for name in report.killed), service
    assert [p["seconds"] >= 15 for p in report.partitions] == [True]
    assert report.accepted == 40
    assert report.lost == []
    assert report.stuck == []
    assert report.twice == {}
    assert report.double_allocations == 0
    assert report.alerts_notified == 40
    assert report.alerts_twice == 0
    assert report.alerts_missed == []
    assert report.node_scrapes > 0
    assert report.node_count_max == 1
    assert report.final == 40
    assert report.probes_final == report.probes
    # A lost server, replica or leader is no reason for a job to fail (the report says why not).
    assert report.unsuccessful == {}
    failovers = [f["seconds"] for f in report.failovers]
    assert failovers, "no scheduler leader was lost"
    # The bench records under 10 s (bench/RESULTS.md); a shared CI machine gets some headroom.
    assert all(seconds is not None and seconds < 15 for seconds in failovers), report.failovers
    assert report.api_unavailable_s < 5
