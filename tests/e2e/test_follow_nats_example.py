"""examples/follow_nats.py as the README documents it for `pai up`: the bus's admin user, its
password and the authority of its certificate, and a job followed to its end."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from tests.e2e.platform import REPO, job_yaml, running_platform

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def test_the_nats_example_follows_a_job_on_pai_ups_private_bus(tmp_path: Path) -> None:
    async with running_platform(tmp_path / "data") as platform:
        info = platform.info
        job_id = await platform.submit(job_yaml("followed", {"main": {"commands": ["echo hi"]}}))
        await platform.completed(job_id)
        base = ("examples/follow_nats.py", "--nats", info.nats_url, "--until-done", "1")
        credentials = ("--user", info.nats_user, "--password", info.nats_password, "--ca", str(info.nats_ca))

        async def run(*argv: str) -> tuple[int | None, str, str]:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                *argv,
                cwd=REPO,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(process.communicate(), 60)
            return process.returncode, out.decode(), err.decode()

        code, out, err = await run(*base, *credentials)
    assert code == 0, err
    kinds = [line.split()[1] for line in out.splitlines()]
    assert kinds[0] == "job.submitted"
    assert kinds[-1] == "job.completed"
