"""The bus killed again and again, a task on its port half the time: does every job still run?

``make bench ARGS="bus_restart"`` (``.venv/bin/python bench/bus_restart_bench.py --cycles 15``).
One `pai up` (embedded, as the tests start it). Each cycle kills nats-server 1-4 times; half
the kills a stand-in for a task (tests/security/squatting.py: unprivileged, none of the
platform's descriptors) takes the bus's port while the server restarts and holds it 0.5-4 s,
so the services' reconnections (and a service's first connection, if it is still starting)
meet a stranger that answers their TLS handshake with plain text. Then one job is submitted
(retried while REST answers 503 for the bus) and must be placed and succeed within 60 s.

Prints one line per cycle (seconds from the submission to `job.scheduled` and to
`job.completed`) and a summary line: cycles, stuck jobs, the median and worst placing delay.
Exits 1 at the first job not done in time, naming it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.e2e.platform import Platform, job_yaml, running_platform  # noqa: E402
from tests.security.squatting import Squatter  # noqa: E402

WITHIN = 60.0


async def kill_the_bus(platform: Platform, port: int, rng: random.Random) -> int:
    nats = platform.child("nats")
    kills = rng.randint(1, 4)
    for _ in range(kills):
        if rng.random() < 0.5:
            squatter = Squatter([port], [], within=2.0, hold=rng.uniform(0.5, 4.0)).start()
            try:
                nats.kill()
                await squatter.report()
            finally:
                squatter.kill()
        else:
            nats.kill()
            await asyncio.sleep(rng.uniform(0.05, 1.5))
    return kills


async def submit(platform: Platform, name: str) -> str:
    body = job_yaml(name, {"main": {"commands": ["echo ok"]}})
    while True:
        response = await platform.api.post(
            "/api/v2/jobs", content=body, headers={"Content-Type": "text/yaml"}
        )
        if response.status_code == 503:  # the bus is not back yet: REST says when to retry
            await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
            continue
        if response.status_code != 202:
            raise SystemExit(f"submission refused: {response.status_code} {response.text}")
        return str(response.json()["jobId"])


async def run(cycles: int, seed: int) -> int:
    rng = random.Random(seed)
    placed: list[float] = []
    scratch = Path(tempfile.mkdtemp(prefix="pai-bus-restarts-"))  # removed when every job succeeded
    # Tasks on the host, as the tests run them: this is about the bus, not images.
    async with running_platform(scratch / "data", env={"PAI_TASK_ENGINE": "host"}) as platform:
        port = urlsplit(platform.info.nats_url).port
        assert port is not None
        for cycle in range(cycles):
            kills = await kill_the_bus(platform, port, rng)
            started = time.monotonic()
            job_id = await submit(platform, f"after-restart-{cycle}")
            try:
                await platform.watcher.wait_for("job.scheduled", job_id, within=WITHIN)
                scheduled = time.monotonic() - started
                completed = await platform.completed(job_id, within=WITHIN)
            except AssertionError as stuck:
                print(f"cycle {cycle}: {kills} kill(s), job {job_id} STUCK: {stuck}", flush=True)
                print(f"the platform's data and logs are kept in {scratch}", flush=True)
                return 1
            if completed.state != "SUCCEEDED":
                why = completed.model_dump_json(
                    include={"exit_code", "diagnostics", "failure", "trigger_role"}
                )
                print(f"cycle {cycle}: job {job_id} ended {completed.state}: {why}", flush=True)
                print(f"the platform's data and logs are kept in {scratch}", flush=True)
                return 1
            placed.append(scheduled)
            done = time.monotonic() - started
            print(
                f"cycle {cycle}: {kills} kill(s), scheduled {scheduled:.1f} s, done {done:.1f} s",
                flush=True,
            )
    shutil.rmtree(scratch, ignore_errors=True)
    summary = {
        "cycles": cycles,
        "stuck": 0,
        "scheduled_median_s": round(statistics.median(placed), 1),
        "scheduled_max_s": round(max(placed), 1),
    }
    print(json.dumps(summary), flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=15, help="rounds of kills, each followed by one job")
    parser.add_argument("--seed", type=int, default=1, help="the random kills and holds are drawn from it")
    args = parser.parse_args()
    return asyncio.run(run(args.cycles, args.seed))


if __name__ == "__main__":
    sys.exit(main())
