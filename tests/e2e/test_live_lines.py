"""`pai job watch` and `pai events` into a pipe: each line reaches the reader as its event
happens, while the command still runs, not when a block of output fills or the command ends."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.e2e.platform import ADMIN_PASSWORD, Cli, job_yaml, running_platform

pytestmark = pytest.mark.timeout(240)


async def first_line(process: asyncio.subprocess.Process, started: float, what: str) -> str:
    """The first line the command wrote, read while it runs; how long it took is printed."""
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 60)
    print(f"{what}: first line after {time.monotonic() - started:.2f} s")
    assert process.returncode is None, f"{what} had ended: {line!r}"
    return line.decode().rstrip("\n")


async def test_watch_and_events_print_each_line_into_a_pipe_as_it_happens(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    async with running_platform(tmp_path / "data") as platform:
        cli = Cli(platform.info.api_url, tmp_path / "config")
        code, _, err = await cli.run("login", "--user", "admin", env={"PAI_PASSWORD": ADMIN_PASSWORD})
        assert code == 0, err
        # The job runs until the test opens its gate: every line read before then was printed live.
        wait = f"while [ ! -f {gate} ]; do sleep 0.05; done"
        job_id = await platform.submit(job_yaml("gated", {"main": {"commands": [wait]}}))
        await platform.watcher.wait_for("task.started", job_id)

        # As a user's shell runs it: stdout a pipe, and Python's buffering as it comes (this
        # machine's environment may turn buffering off, which would hide a missing flush).
        plain = {"PYTHONUNBUFFERED": ""}
        started = time.monotonic()
        watch = await cli.start("job", "watch", "gated", env=plain)
        events = await cli.start("events", "--job", "gated", "--since", "0", env=plain)
        as_json = await cli.start("events", "--job", "gated", "--since", "0", "--json", env=plain)
        try:
            assert (
                await first_line(watch, started, "watch")
                == "submitted admin~gated to virtual cluster default"
            )
            line = await first_line(events, started, "events")
            assert line.split("  ")[1:] == [
                "job.submitted",
                "submitted admin~gated to virtual cluster default",
            ]
            assert '"type":"job.submitted"' in await first_line(as_json, started, "events --json")
            # Each later line as well: the task's start, while the task still waits at the gate.
            assert watch.stdout is not None
            while "started on" not in (line := await first_line(watch, started, "watch")):
                pass
            assert line.startswith("task main[0] started on"), line
            assert not platform.watcher.of("job.completed", job_id), "the job was still running"
        finally:
            gate.touch()
            for process in (events, as_json):
                if process.returncode is None:
                    process.terminate()
        rest, notes = await watch.communicate()
        assert watch.returncode == 0, notes.decode()
        assert rest.decode().splitlines()[-1] == "job SUCCEEDED (exit code 0)"
        for process in (events, as_json):
            await process.wait()
