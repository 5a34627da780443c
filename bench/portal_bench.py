"""The web portal in Chromium over a large read model: list, big job page, live state change.

Fills the REST service's read model (SQLite, the embedded default) with N jobs as in
rest_list_bench, adds one running job of 1,000 tasks, serves REST and the portal on ports of
this machine, signs in with Debian's Chromium (Playwright) and times, from the start of the
navigation to the moment the page shows it:
  - /job-list.html with its first page of 20 jobs (target: p50 < 400 ms),
  - /job-detail.html of the 1,000-task job with every task row (target: p50 < 1 s),
  - on an open job page, a state change written to the read model until the page shows it
    (target: p50 < 1 s; live updates as the portal gives them without the event gateway: it asks REST
    every PAI_PORTAL_POLL_SECONDS, 0.5 s by default).

Command: .venv/bin/python bench/portal_bench.py [--jobs N] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from cryptography.fernet import Fernet
from sqlalchemy import insert, update

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.rest_list_bench import _fill, _job_rows, _users  # the script beside this one
from libs.backbone.logging import configure_logging
from libs.backbone.natsserver import EmbeddedNats
from libs.protocol.events import JobSubmitted
from libs.protocol.jobs import stored_job
from services.portal.app import build_app as build_portal
from services.portal.settings import PortalSettings
from services.rest.adapters.tables import job_attempts, jobs, task_attempts
from services.rest.app import build_app as build_rest
from services.rest.core.totals import job_row_from_config
from services.rest.keys import ENGINE
from services.rest.settings import RestSettings

PASSWORD = "bench-password"
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TASKS = 1000


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


def big_job(now: int) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """A running job of 1,000 tasks (one role), its attempt and its tasks as the projection writes them."""
    name = "big-sweep-1000"
    config = {
        "protocolVersion": 2,
        "name": name,
        "type": "job",
        "prerequisites": [{"name": "image", "type": "dockerimage", "uri": "python:3.11-slim"}],
        "taskRoles": {
            "worker": {
                "instances": TASKS,
                "dockerImage": "image",
                "resourcePerInstance": {"cpu": 1, "memoryMB": 512, "gpu": 0},
                "commands": ["python sweep.py"],
            }
        },
    }
    event = JobSubmitted(
        job_id=uuid.uuid4().hex,
        user="admin",
        name=name,
        virtual_cluster="default",
        priority=0,
        config=stored_job(config),
    )
    row = job_row_from_config(event, now - 60_000)
    row.update(state="RUNNING", sub_state="Running", attempt=0, launched_time=now - 50_000)
    row.update(total_tasks=TASKS, total_task_roles=1, total_gpus=0)
    attempt = {
        "job_id": row["id"],
        "attempt": 0,
        "state": "RUNNING",
        "sub_state": "Running",
        "created_time": now - 55_000,
        "launched_time": now - 50_000,
    }
    tasks = [
        {
            "job_id": row["id"],
            "job_attempt": 0,
            "role": "worker",
            "task_index": i,
            "task_attempt": 0,
            "state": "SUCCEEDED" if i % 3 == 0 else "RUNNING",
            "node": f"node-{i // 8:03d}",
            "ip": f"10.0.{i // 250}.{i % 250}",
            "ports": {"http": 20000 + i},
            "created_time": now - 55_000,
            "launched_time": now - 50_000,
            "completed_time": now - 1000 if i % 3 == 0 else None,
            "exit_code": 0 if i % 3 == 0 else None,
        }
        for i in range(TASKS)
    ]
    return row, tasks, attempt


async def api_timings(rest_url: str, portal_url: str, big: str, rounds: int) -> dict[str, list[float]]:
    """The same reads without a browser: REST directly, and through the portal's proxy."""
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"{rest_url}/api/v2/authn/basic/login", json={"username": "admin", "password": PASSWORD}
        ) as answer:
            token = (await answer.json())["token"]
        headers = {"Authorization": f"Bearer {token}"}
        paths = {
            "first page of 20": "/api/v2/jobs?limit=20&order=submissionTime,DESC",
            "total count": "/api/v2/jobs?limit=1&withTotalCount=true",
            f"job of {TASKS:,} tasks": f"/api/v2/jobs/admin~{big}",
        }
        times: dict[str, list[float]] = {}
        for label, path in paths.items():
            for base, via in ((rest_url, "REST"), (portal_url, "portal")):
                key = f"{label} ({via})"
                times[key] = []
                for _ in range(rounds):
                    started = time.perf_counter()
                    async with session.get(base + path, headers=headers) as response:
                        await response.read()
                        assert response.status == 200, response.status
                    times[key].append((time.perf_counter() - started) * 1000)
    return times


async def timed(page: Any, url: str, ready: str) -> float:
    started = time.perf_counter()
    await page.goto(url)
    await page.wait_for_function(ready, timeout=30_000)
    return (time.perf_counter() - started) * 1000


async def main(total: int, rounds: int) -> None:
    from playwright.async_api import async_playwright

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        async with EmbeddedNats(root / "nats") as nats:
            settings = RestSettings(
                nats_url=nats.url,
                data_dir=root / "data",
                admin_password=PASSWORD,
                rate_limit_api_per_min=0,
                rate_limit_list_job_per_min=0,
                log_level="warning",
                log_format="json",
            )
            configure_logging(settings)
            rest_app = build_rest(settings)
            rest, rest_url = await serve(rest_app)
            engine = rest_app[ENGINE]
            started = time.perf_counter()
            rows = _job_rows(total, _users(400), random.Random(1))
            await _fill(engine, rows)
            now = int(time.time() * 1000)
            row, tasks, attempt = big_job(now)
            waiting = dict(rows[-1])
            async with engine.begin() as conn:
                await conn.execute(insert(jobs), [row])
                await conn.execute(insert(job_attempts), [attempt])
                await conn.execute(insert(task_attempts), tasks)
            print(f"{len(rows) + 1} jobs loaded in {time.perf_counter() - started:.1f} s")
            portal_settings = PortalSettings(
                data_dir=root / "data", portal_rest_url=rest_url, log_level="warning", log_format="json"
            )
            portal, portal_url = await serve(build_portal(portal_settings, key=Fernet.generate_key()))
            try:
                async with async_playwright() as driver:
                    browser = await driver.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                    page = await browser.new_page()
                    await page.goto(portal_url + "/")
                    await page.fill("#username", "admin")
                    await page.fill("#password", PASSWORD)
                    await page.click("button[type=submit]")
                    await page.wait_for_url("**/home.html")

                    api_times = await api_timings(rest_url, portal_url, row["name"], rounds)
                    rows_ready = "() => document.querySelectorAll('#rows tr[data-job]').length === 20"
                    lists = [
                        await timed(page, portal_url + "/job-list.html", rows_ready) for _ in range(rounds)
                    ]
                    tasks_ready = f"() => document.querySelectorAll('tr[data-task]').length === {TASKS}"
                    detail = f"{portal_url}/job-detail.html?username=admin&jobName={row['name']}"
                    pages = [await timed(page, detail, tasks_ready) for _ in range(rounds)]
                    marks = await page.evaluate(
                        "() => Object.fromEntries(["
                        "...performance.getEntriesByType('mark').map(m => [m.name, Math.round(m.startTime)]),"
                        "['domContentLoaded', Math.round(performance.getEntriesByType('navigation')[0]"
                        ".domContentLoadedEventEnd)]])"
                    )
                    # job-fetched: the detail arrived; job-shown: every task row is in the page;
                    # job-painted: the first frame after (layout and paint of the rows).
                    print(f"job page, ms after the navigation started: {marks}")

                    changes = []
                    user, name = waiting["username"], waiting["name"]
                    for i in range(rounds):
                        state = ("WAITING", "RUNNING")[i % 2]
                        async with engine.begin() as conn:
                            await conn.execute(
                                update(jobs)
                                .where(jobs.c.id == waiting["id"])
                                .values(state=state, sub_state=state)
                            )
                        url = f"{portal_url}/job-detail.html?username={user}&jobName={name}"
                        await page.goto(url)
                        await page.wait_for_selector(f"body[data-state={state}]")
                        await page.wait_for_selector("body[data-live]")
                        await asyncio.sleep(random.uniform(0.0, 0.5))  # any moment of the poll cycle
                        changed = "STOPPED" if state == "RUNNING" else "RUNNING"
                        started = time.perf_counter()
                        async with engine.begin() as conn:
                            await conn.execute(
                                update(jobs)
                                .where(jobs.c.id == waiting["id"])
                                .values(state=changed, sub_state=changed)
                            )
                        await page.wait_for_selector(f"body[data-state={changed}]", timeout=10_000)
                        changes.append((time.perf_counter() - started) * 1000)
                    await browser.close()
            finally:
                await portal.cleanup()
                await rest.cleanup()
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"{'API call (no browser)':44} {'n':>3} {'p50 ms':>8} {'max ms':>8}")
    for label, values in api_times.items():
        print(f"{label:44} {len(values):3d} {statistics.median(values):8.0f} {max(values):8.0f}")
    print(f"{'measure':44} {'n':>3} {'p50 ms':>8} {'max ms':>8}  target")
    for label, values, target in (
        (f"job list, first page of {total:,} jobs", lists, 400),
        (f"job page of {TASKS:,} tasks", pages, 1000),
        ("state change shown on an open job page", changes, 1000),
    ):
        verdict = "met" if statistics.median(values) < target else "NOT met"
        print(
            f"{label:44} {len(values):3d} {statistics.median(values):8.0f} {max(values):8.0f}  "
            f"p50 < {target} ms: {verdict}"
        )
    print(f"load average {load}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(main(args.jobs, args.rounds))
