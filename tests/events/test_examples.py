"""The examples/ tools that follow events (over SSE, and straight from JetStream) run as written."""

from __future__ import annotations

import asyncio
import sys

from libs.backbone.connecting import Bus
from libs.backbone.natsserver import EmbeddedNats
from tests.events.lifecycles import LIFECYCLE, life
from tests.events.support import REPO, publish_all


async def run(*argv: str) -> tuple[int, list[str]]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, *argv, cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    if process.returncode != 0:
        print(err.decode(), file=sys.stderr)
    return process.returncode, out.decode().splitlines()


async def test_the_sse_example_follows_a_job_to_its_end(topology: Bus, gateway_url: str) -> None:
    await publish_all(topology.js, life("j1", "alice", "train"))
    code, lines = await run(
        "examples/follow_sse.py",
        *("--server", gateway_url, "--token", "alice-token", "--job", "alice~train", "--since", "0"),
        "--until-done",
    )
    assert code == 0
    assert [line.split()[1] for line in lines] == LIFECYCLE
    assert all(line.endswith("job=j1") for line in lines)


async def test_the_nats_example_reads_the_subjects_and_checks_each_event_against_the_catalog(
    topology: Bus, nats_server: EmbeddedNats
) -> None:
    await publish_all(topology.js, life("j1", "alice", "train") + life("j2", "bob", "eval"))
    code, lines = await run("examples/follow_nats.py", "--nats", nats_server.url, "--until-done", "2")
    assert code == 0
    assert [line.split()[1] for line in lines] == LIFECYCLE * 2
    assert [int(line.split()[0]) for line in lines] == list(range(1, 11))
