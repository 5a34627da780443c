"""GET /api/v2/usage: GPU-hours, CPU-hours, jobs by final state and mean wait, per user and VC.

The history is written through the service's own projection (``apply_events``), with known
resources and times: every figure below is worked out by hand from those. Each test runs on
SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any, Literal

import pytest
from aiohttp.test_utils import TestClient
from sqlalchemy import select, text

from libs.protocol.events import (
    EventBase,
    JobCompleted,
    JobRetrying,
    JobScheduled,
    JobState,
    JobSubmitted,
    TaskPlacement,
    TaskStarted,
)
from services.rest.adapters.database import create_engine, migrate
from services.rest.adapters.tables import jobs
from services.rest.handlers import apply_events
from services.rest.keys import ENGINE
from tests.rest.test_job_list_queries import _migrate_to
from tests.rest.test_users_groups import create_user
from tests.support.jobs import job_model

Client = TestClient[Any, Any]
Final = Literal[JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED]
HOUR = 3600
DAYS_8 = 8 * 24 * HOUR
# Whole seconds, ten hours ago: the period below is [BASE, BASE + 2 h).
BASE = int(time.time()) // 60 * 60 - 10 * HOUR


def at(seconds: int) -> datetime:
    return datetime.fromtimestamp(BASE + seconds, UTC)


def iso(seconds: int) -> str:
    return at(seconds).isoformat().replace("+00:00", "Z")


def config(
    name: str, vc: str, *, instances: int, gpu: int, cpu: int, gpu_milli: int | None = None
) -> dict[str, Any]:
    job: dict[str, Any] = {
        "protocolVersion": 2,
        "name": name,
        "type": "job",
        "taskRoles": {
            "worker": {
                "instances": instances,
                "dockerImage": "image",
                "resourcePerInstance": {"cpu": cpu, "memoryMB": 1024, "gpu": gpu},
                "commands": ["true"],
            }
        },
        "defaults": {"virtualCluster": vc},
    }
    if gpu_milli is not None:
        job["extras"] = {"gpuShare": {"taskRoles": {"worker": {"gpuMilli": gpu_milli}}}}
    return job


def job(
    user: str,
    name: str,
    vc: str,
    *,
    submitted: int,
    runs: list[tuple[int, int | None]],
    state: Final | None,
    instances: int = 1,
    gpu: int = 1,
    cpu: int = 1,
    gpu_milli: int | None = None,
) -> list[EventBase]:
    """A job's events: submitted, then each attempt (start, end) in ``runs``; every attempt
    but the last retried, the last ending in ``state`` (None: it still runs)."""
    job_id = uuid.uuid4().hex
    spec = config(name, vc, instances=instances, gpu=gpu, cpu=cpu, gpu_milli=gpu_milli)
    events: list[EventBase] = [
        JobSubmitted(
            job_id=job_id,
            user=user,
            name=name,
            virtual_cluster=vc,
            config=job_model(spec),
            occurred_at=at(submitted),
        )
    ]
    placements = tuple(
        TaskPlacement(role="worker", index=i, node="node-a", node_address="10.0.0.1")
        for i in range(instances)
    )
    for attempt, (start, end) in enumerate(runs):
        events.append(
            JobScheduled(job_id=job_id, attempt=attempt, placements=placements, occurred_at=at(start - 1))
        )
        events += [
            TaskStarted(
                job_id=job_id, attempt=attempt, role="worker", index=i, node="node-a", occurred_at=at(start)
            )
            for i in range(instances)
        ]
        if end is None:
            break
        if attempt < len(runs) - 1:
            events.append(
                JobRetrying(
                    job_id=job_id,
                    attempt=attempt,
                    next_attempt=attempt + 1,
                    kind="user",
                    counted=True,
                    delay_seconds=1,
                    reason="failed",
                    occurred_at=at(end),
                )
            )
        elif state is not None:
            code = {JobState.SUCCEEDED: 0, JobState.FAILED: 1, JobState.STOPPED: -210}[state]
            events.append(
                JobCompleted(job_id=job_id, attempt=attempt, state=state, exit_code=code, occurred_at=at(end))
            )
    return events


def history() -> list[EventBase]:
    """What the tests' period [BASE, BASE + 2 h) holds, worked out by hand:

    alice: 4 GPUs, 8 CPUs for 1 h (SUCCEEDED, waited 120 s) -> 4 GPU-h, 8 CPU-h, in default;
           1 GPU, 2 CPUs for two attempts of 30 min with 10 min between them (FAILED, waited
           600 s) -> 1 GPU-h, 2 CPU-h, in team.
    bob:   half a GPU (a share), 1 CPU, running since 30 min in, to the period's end at 2 h
           (waited 1800 s) -> 0.75 GPU-h, 1.5 CPU-h; 1 GPU, 1 CPU for 6 min (STOPPED, waited
           100 s) -> 0.1 GPU-h, 0.1 CPU-h.
    carol: 2 GPUs, 2 CPUs from 30 min before the period to 30 min in (SUCCEEDED) -> 1 GPU-h,
           1 CPU-h inside; it first ran before the period, so no wait counts.
    dave:  a job that ran and ended 8 days before: outside the period and the last 7 days.
    """
    return [
        *job("alice", "train", "default", submitted=0, runs=[(120, 120 + HOUR)], state=JobState.SUCCEEDED,
             instances=2, gpu=2, cpu=4),
        *job("alice", "retried", "team", submitted=0, runs=[(600, 2400), (3000, 4800)], state=JobState.FAILED,
             gpu=1, cpu=2),
        *job("bob", "serving", "default", submitted=0, runs=[(1800, None)], state=None, gpu=1, cpu=1,
             gpu_milli=500),
        *job("bob", "stopped", "default", submitted=0, runs=[(100, 460)], state=JobState.STOPPED),
        *job("carol", "across", "default", submitted=-1900, runs=[(-1800, 1800)], state=JobState.SUCCEEDED,
             gpu=2, cpu=2),
        *job("dave", "old", "default", submitted=-DAYS_8, runs=[(-DAYS_8 + 10, -DAYS_8 + HOUR)],
             state=JobState.SUCCEEDED),
    ]  # fmt: skip


@pytest.fixture
async def users(api: Client, admin_headers: dict[str, str]) -> dict[str, dict[str, str]]:
    made = {name: await create_user(api, admin_headers, name) for name in ("alice", "bob")}
    await apply_events(api.app[ENGINE], history())
    return {"admin": admin_headers, **made}


async def usage(api: Client, headers: dict[str, str], **query: str) -> dict[str, Any]:
    response = await api.get("/api/v2/usage", params=query, headers=headers)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


def rows(body: dict[str, Any], key: str) -> dict[str, dict[str, Any]]:
    return {row[key]: row for row in body["rows"]}


PERIOD = {"from": iso(0), "to": iso(2 * HOUR)}


async def test_an_admin_sees_each_users_gpu_and_cpu_hours_jobs_by_final_state_and_mean_wait(
    api: Client, users: dict[str, dict[str, str]]
) -> None:
    body = await usage(api, users["admin"], by="user", **PERIOD)
    assert (body["by"], body["from"], body["to"]) == ("user", BASE * 1000, (BASE + 2 * HOUR) * 1000)
    found = rows(body, "user")
    assert set(found) == {"alice", "bob", "carol"}
    alice, bob, carol = found["alice"], found["bob"], found["carol"]
    assert alice["gpuHours"] == pytest.approx(5.0)
    assert alice["cpuHours"] == pytest.approx(10.0)
    assert alice["jobs"] == {"SUCCEEDED": 1, "FAILED": 1, "STOPPED": 0}
    assert (alice["jobsRun"], alice["jobsStarted"], alice["meanWaitSeconds"]) == (2, 2, 360.0)
    assert bob["gpuHours"] == pytest.approx(0.85)
    assert bob["cpuHours"] == pytest.approx(1.6)
    assert bob["jobs"] == {"SUCCEEDED": 0, "FAILED": 0, "STOPPED": 1}
    assert (bob["jobsRun"], bob["meanWaitSeconds"]) == (2, 950.0)
    assert carol["gpuHours"] == pytest.approx(1.0)
    assert carol["cpuHours"] == pytest.approx(1.0)
    assert carol["jobs"] == {"SUCCEEDED": 1, "FAILED": 0, "STOPPED": 0}
    assert (carol["jobsStarted"], carol["meanWaitSeconds"]) == (0, None)
    # Most GPU-hours first; the total adds every row.
    assert [row["user"] for row in body["rows"]] == ["alice", "carol", "bob"]
    assert body["total"]["gpuHours"] == pytest.approx(6.85)
    assert body["total"]["jobs"] == {"SUCCEEDED": 2, "FAILED": 1, "STOPPED": 1}
    assert body["total"]["meanWaitSeconds"] == pytest.approx((120 + 600 + 1800 + 100) / 4)


async def test_by_vc_groups_the_same_hours_by_virtual_cluster(
    api: Client, users: dict[str, dict[str, str]]
) -> None:
    found = rows(await usage(api, users["admin"], by="vc", **PERIOD), "virtualCluster")
    assert set(found) == {"default", "team"}
    assert found["team"]["gpuHours"] == pytest.approx(1.0)
    assert found["default"]["gpuHours"] == pytest.approx(4.0 + 0.85 + 1.0)
    assert found["default"]["jobs"] == {"SUCCEEDED": 2, "FAILED": 0, "STOPPED": 1}


async def test_a_user_sees_only_their_own_jobs_by_user_and_by_vc(
    api: Client, users: dict[str, dict[str, str]]
) -> None:
    mine = await usage(api, users["alice"], by="user", **PERIOD)
    assert [row["user"] for row in mine["rows"]] == ["alice"]
    assert mine["total"]["gpuHours"] == pytest.approx(5.0)
    by_vc = rows(await usage(api, users["alice"], by="vc", **PERIOD), "virtualCluster")
    assert {vc: row["gpuHours"] for vc, row in by_vc.items()} == {
        "default": pytest.approx(4.0),
        "team": pytest.approx(1.0),
    }
    bobs = rows(await usage(api, users["bob"], by="vc", **PERIOD), "virtualCluster")
    assert bobs["default"]["gpuHours"] == pytest.approx(0.85)
    assert set(bobs) == {"default"}


async def test_the_default_period_is_the_last_7_days_and_relative_forms_reach_further(
    api: Client, users: dict[str, dict[str, str]]
) -> None:
    recent = await usage(api, users["admin"])
    assert recent["by"] == "user"
    assert recent["to"] - recent["from"] == 7 * 24 * HOUR * 1000
    assert "dave" not in rows(recent, "user")
    # bob's job still runs: it counts up to now.
    running_hours = (time.time() - (BASE + 1800)) / HOUR
    assert rows(recent, "user")["bob"]["gpuHours"] == pytest.approx(0.5 * running_hours + 0.1, abs=0.01)
    further = rows(await usage(api, users["admin"], **{"from": "9d", "to": "now"}), "user")
    assert further["dave"]["gpuHours"] == pytest.approx((HOUR - 10) / HOUR)
    assert (
        rows(await usage(api, users["admin"], **{"from": "240h"}), "user")["dave"]["jobs"]["SUCCEEDED"] == 1
    )


@pytest.mark.parametrize(
    ("query", "parameter", "words"),
    [
        ({"from": "yesterday"}, "from", "ISO-8601"),
        ({"to": "2026-13-45"}, "to", "7d, 24h"),
        ({"from": "7 days"}, "from", "units s, m, h, d, w"),
        ({"by": "group"}, "by", "user, vc"),
        ({"from": "1d", "to": "2d"}, "from", "before to"),
    ],
    ids=["a word", "no such date", "a spelled-out span", "an unknown grouping", "from after to"],
)
async def test_a_bad_parameter_is_a_400_naming_it_and_what_it_accepts(
    api: Client, admin_headers: dict[str, str], query: dict[str, str], parameter: str, words: str
) -> None:
    response = await api.get("/api/v2/usage", params=query, headers=admin_headers)
    assert response.status == 400
    body = await response.json()
    assert body["code"] == "InvalidParametersError"
    assert body["parameter"] == parameter
    assert body["message"].startswith(parameter + " must be"), body
    assert words in body["message"], body


async def test_without_a_token_usage_is_refused(api: Client) -> None:
    response = await api.get("/api/v2/usage")
    assert response.status == 401
    assert (await response.json())["code"] == "UnauthorizedUserError"


async def test_migration_0008_gives_jobs_from_before_it_their_totals_and_running_time(
    database_url: str,
) -> None:
    engine = create_engine(database_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_migrate_to, "0007")
            spec = config("shared", "default", instances=3, gpu=1, cpu=2, gpu_milli=250)
            insert_job = text(
                "INSERT INTO jobs (id, username, name, virtual_cluster, priority, tags, state, sub_state,"
                " execution_type, retries, retries_user, retries_platform, retries_resource,"
                " submission_time, launched_time, completed_time, total_gpus, total_tasks,"
                " total_task_roles, config) VALUES (:id, 'alice', :name, 'default', 0, '[]', :state,"
                " 'Completed', 'START', 0, 0, 0, 0, 0, 10, :completed, 3, 3, 1, :config)"
            )
            await conn.execute(
                insert_job,
                {
                    "id": "old",
                    "name": "old",
                    "state": "SUCCEEDED",
                    "completed": 9000,
                    "config": json.dumps(spec),
                },
            )
            await conn.execute(
                insert_job,
                {"id": "live", "name": "live", "state": "RUNNING", "completed": None, "config": "{}"},
            )
            insert_attempt = text(
                "INSERT INTO job_attempts (job_id, attempt, state, sub_state, launched_time, completed_time)"
                " VALUES ('old', :attempt, 'FAILED', 'Completed', :launched, :completed)"
            )
            for attempt, launched, completed in ((0, 10, 2010), (1, 5000, 9000)):
                await conn.execute(
                    insert_attempt, {"attempt": attempt, "launched": launched, "completed": completed}
                )
        await migrate(engine)
        async with engine.connect() as conn:
            found = {
                row.id: (row.total_cpus, row.total_gpu_milli, row.run_ms)
                for row in await conn.execute(
                    select(jobs.c.id, jobs.c.total_cpus, jobs.c.total_gpu_milli, jobs.c.run_ms)
                )
            }
        # 3 instances of 2 CPUs and a quarter GPU; two attempts of 2 s and 4 s, the 3 s between not counted.
        assert found == {"old": (6, 750, 6000), "live": (0, 0, None)}
        async with engine.begin() as conn:
            await conn.run_sync(_migrate_to, "0007", down=True)
        await migrate(engine)
    finally:
        await engine.dispose()
