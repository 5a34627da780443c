"""`pai job logs -f` on a running task: every line once, as it comes, within the rate limits."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.platform import ADMIN_PASSWORD, Cli, running_platform

pytestmark = pytest.mark.timeout(240)

LINES = 6


def ticker(gate: Path) -> str:
    """A job of two tasks that print one line a second, to stdout and to stderr; the last line
    waits for `gate`, so the test knows the tasks still run when it reads their first lines."""
    wait = f"[ $i -eq {LINES} ] && while [ ! -f {gate} ]; do sleep 0.05; done"
    return (
        "protocolVersion: 2\nname: ticker\ntype: job\n"
        "prerequisites:\n  - {name: image, type: dockerimage, uri: python:3.11-slim}\n"
        "taskRoles:\n"
        "  main:\n    instances: 2\n    dockerImage: image\n"
        "    resourcePerInstance: {cpu: 1, memoryMB: 128, gpu: 0}\n"
        "    commands:\n"
        f'      - \'for i in $(seq {LINES}); do {wait}; echo "out $PAI_TASK_INDEX $i"; '
        'echo "err $PAI_TASK_INDEX $i" >&2; sleep 1; done\'\n'
    )


def expected(stream: str, index: int) -> list[str]:
    return [f"{stream} {index} {i}" for i in range(1, LINES + 1)]


async def test_following_a_running_task_prints_every_line_once_as_it_comes(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    # OpenPAI's own limit, 600 requests a minute from one address: three followers ask twice a
    # second at most. Before, a follower asked without pause and passed it within a second.
    async with running_platform(tmp_path / "data", api_per_min=None) as platform:
        cli = Cli(platform.info.api_url, tmp_path / "config")
        code, _, err = await cli.run("login", "--user", "admin", env={"PAI_PASSWORD": ADMIN_PASSWORD})
        assert code == 0, err
        job_id = await platform.submit(ticker(gate))
        await platform.watcher.wait_for("task.started", job_id, count=2)

        every = ("--interval", "1")
        first = await cli.start("job", "logs", "ticker", "-f", *every)  # the first role, task 0, all
        stdout = await cli.start(
            "job", "logs", "ticker", "--role", "main", "--index", "1", "--file", "stdout", "-f", *every
        )
        stderr = await cli.start(
            "job", "logs", "ticker", "--role", "main", "--index", "1", "--file", "stderr", "-f", *every
        )

        # The first line arrives while the task still runs: the follower prints as the log grows.
        assert first.stdout is not None
        line = await asyncio.wait_for(first.stdout.readline(), 60)
        if line.startswith(b"[pai] "):  # the executor's note on the image comes first
            line += await asyncio.wait_for(first.stdout.readline(), 60)
        assert line.decode().splitlines()[-1].strip() in expected("out", 0) + expected("err", 0)
        assert not platform.watcher.of("job.completed", job_id), "the job was still running"
        gate.touch()

        rest, first_err = await first.communicate()
        out_1, out_1_err = await stdout.communicate()
        err_1, err_1_err = await stderr.communicate()
        completed = await platform.completed(job_id)
        assert completed.state == "SUCCEEDED"

    for process, notes in ((first, first_err), (stdout, out_1_err), (stderr, err_1_err)):
        assert process.returncode == 0, notes.decode()
        assert "slow down" not in notes.decode(), notes.decode()
        assert "Too many" not in notes.decode(), notes.decode()

    everything = Counter((line + rest).decode().splitlines())
    for wanted in expected("out", 0) + expected("err", 0):
        assert everything[wanted] == 1, (wanted, everything)
    assert [x for x in out_1.decode().splitlines() if x.startswith("out ")] == expected("out", 1)
    assert "err 1 1" not in out_1.decode()
    assert [x for x in err_1.decode().splitlines() if x.startswith("err ")] == expected("err", 1)
    assert "out 1 1" not in err_1.decode()
