"""The usage report (GET /api/v2/usage) over a large job history, per SQL backend.

Fills the REST service's read model with N finished jobs (rows as the service writes them at
submission, through its own `job_row_from_config`, then moved to a final state, each with one
job attempt, a fifth of them with a retried attempt before it), from 400 users in 6 VCs, then
times the report's SQL and its assembly (services/rest/adapters/usage.py and core/usage.py) as
the route runs them: by user and by VC for an admin, and one user's own. Two histories:
every job inside the period (the worst case: the report sums all N), and N jobs spread over
180 days with the default period of the last 7 days. Target: under 1 s.

SQLite is the embedded default (a file in a temporary folder). PostgreSQL runs when a server
answers at the admin DSN: the benchmark creates a database of its own and drops it at the end.

Command: .venv/bin/python bench/usage_bench.py [--jobs N] [--rounds R] [--backend sqlite|postgresql|both]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]  # asyncpg ships no type hints
from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import AsyncEngine

from libs.protocol.events import JobSubmitted
from libs.protocol.jobs import stored_job
from services.rest.adapters.database import create_engine, migrate
from services.rest.adapters.tables import job_attempts, jobs
from services.rest.adapters.usage import usage_sums
from services.rest.core.totals import job_row_from_config
from services.rest.core.usage import read_period, report

PG_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
VCS = ("default", "vision", "nlp", "speech", "recsys", "research")
STATES = (("SUCCEEDED", 0, 60), ("FAILED", 1, 25), ("STOPPED", -210, 15))
DAY_MS = 86_400_000
TARGET_S = 1.0


def _rows(total: int, span_days: int, now: int, rng: random.Random) -> tuple[list[Any], list[Any]]:
    users = [f"user{n:03d}" for n in range(400)]
    weights = [1 / (rank + 1) ** 0.8 for rank in range(len(users))]
    job_rows: list[dict[str, Any]] = []
    attempt_rows: list[dict[str, Any]] = []
    start = now - span_days * DAY_MS
    for n in range(total):
        user = rng.choices(users, weights)[0]
        instances, gpus = rng.choice(((1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (1, 0)))
        vc = rng.choice(VCS)
        name = f"job-{n:06d}"
        config: dict[str, Any] = {
            "protocolVersion": 2,
            "name": name,
            "type": "job",
            "taskRoles": {
                "worker": {
                    "instances": instances,
                    "dockerImage": "image",
                    "resourcePerInstance": {"cpu": 4 * max(gpus, 1), "memoryMB": 16384, "gpu": gpus},
                    "commands": ["python train.py"],
                }
            },
            "defaults": {"virtualCluster": vc},
        }
        event = JobSubmitted(
            job_id=uuid.uuid4().hex,
            user=user,
            name=config["name"],
            virtual_cluster=vc,
            priority=0,
            config=stored_job(config),
        )
        submitted = start + rng.randrange(span_days * DAY_MS - DAY_MS)
        row = job_row_from_config(event, submitted)
        state, exit_code, _ = rng.choices(STATES, [w for *_, w in STATES])[0]
        launched = submitted + rng.randrange(1_000, 600_000)
        attempts = [(0, launched, launched + rng.randrange(60_000, 6 * 3_600_000))]
        if rng.random() < 0.2:  # a retried first attempt
            first_end = attempts[0][2]
            attempts.append((1, first_end + 10_000, first_end + 10_000 + rng.randrange(60_000, 3_600_000)))
        completed = min(attempts[-1][2], now - 1)
        row.update(
            # What the projection records when the job ends (services/rest/adapters/projecting.py).
            run_ms=sum(min(ended, now - 1) - begun for _, begun, ended in attempts),
            state=state,
            sub_state="Completed",
            launched_time=launched,
            completed_time=completed,
            attempt=attempts[-1][0],
            exit_code=exit_code,
        )
        job_rows.append(row)
        for attempt, begun, ended in attempts:
            attempt_rows.append(
                {
                    "job_id": row["id"],
                    "attempt": attempt,
                    "state": state if attempt == attempts[-1][0] else "FAILED",
                    "sub_state": "Completed",
                    "created_time": begun - 500,
                    "launched_time": begun,
                    "completed_time": min(ended, now - 1),
                }
            )
    return job_rows, attempt_rows


async def _fill(engine: AsyncEngine, job_rows: list[Any], attempt_rows: list[Any]) -> None:
    for table, rows in ((jobs, job_rows), (job_attempts, attempt_rows)):
        for start in range(0, len(rows), 2000):
            async with engine.begin() as conn:
                await conn.execute(insert(table), rows[start : start + 2000])
    if engine.dialect.name == "postgresql":
        async with engine.connect() as conn:
            autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await autocommit.execute(text("VACUUM ANALYZE jobs"))
            await autocommit.execute(text("VACUUM ANALYZE job_attempts"))


async def _time(
    engine: AsyncEngine, rounds: int, by: str, since: str, user: str | None, now: int
) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU seconds (this process's threads; PostgreSQL's own work is not in it)."""
    times, cpu = [], []
    for _ in range(rounds):
        began, began_cpu = time.perf_counter(), time.process_time()
        period = read_period(since, None, now)
        answer = report(by, period, *await usage_sums(engine, by, period, user))
        times.append(time.perf_counter() - began)
        cpu.append(time.process_time() - began_cpu)
    assert answer["rows"], answer
    return times, cpu


async def _run(fresh: Callable[[str], Awaitable[str]], total: int, rounds: int, label: str) -> list[str]:
    lines = []
    now = int(time.time() * 1000)
    for span_days, since in ((7, "8d"), (180, "7d")):
        engine = create_engine(await fresh(f"span{span_days}"))
        try:
            await migrate(engine)
            job_rows, attempt_rows = _rows(total, span_days, now, random.Random(7))
            began = time.perf_counter()
            await _fill(engine, job_rows, attempt_rows)
            filled = time.perf_counter() - began
            busiest = job_rows[0]["username"]
            history = f"{total:,} jobs over {span_days} days, period {since}"
            print(f"{label}: {history}: filled in {filled:.1f} s", flush=True)
            for name, by, user in (
                ("by user", "user", None),
                ("by vc", "vc", None),
                ("one user's own", "user", busiest),
            ):
                times, cpu = await _time(engine, rounds, by, since, user, now)
                line = (
                    f"| {label} | {history} | {name} | {statistics.median(times) * 1000:.0f} ms "
                    f"| {max(times) * 1000:.0f} ms | {statistics.median(cpu) * 1000:.0f} ms |"
                )
                print(line, flush=True)
                lines.append(line)
                if statistics.median(times) >= TARGET_S:
                    print(f"{name}: median {statistics.median(times):.2f} s, over {TARGET_S} s", flush=True)
        finally:
            await engine.dispose()
    return lines


async def _with_postgres(total: int, rounds: int) -> list[str]:
    try:
        admin = await asyncpg.connect(PG_ADMIN_DSN, timeout=2)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        print("postgresql: no server at 127.0.0.1:5432, skipped")
        return []
    made: list[str] = []

    async def fresh(suffix: str) -> str:
        name = f"pai_usage_bench_{uuid.uuid4().hex[:8]}_{suffix}"
        await admin.execute(f'CREATE DATABASE "{name}"')
        made.append(name)
        return f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"

    try:
        return await _run(fresh, total, rounds, "PostgreSQL")
    finally:
        for name in made:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    args = parser.parse_args()
    lines = [
        "| backend | history | report | median | max | CPU of this process, median |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    if args.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as folder:

            async def fresh(suffix: str) -> str:
                return f"sqlite+aiosqlite:///{Path(folder) / f'rest-{suffix}.db'}"

            lines += await _run(fresh, args.jobs, args.rounds, "SQLite")
    if args.backend in ("postgresql", "both"):
        lines += await _with_postgres(args.jobs, args.rounds)
    print("\n".join(lines))


if __name__ == "__main__":
    asyncio.run(main())
