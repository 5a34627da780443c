"""The data dir's filesystem filled up and freed again while the platform runs.

The platform's data dir lies on a small filesystem of the test's own (a tmpfs of 200 MB, mounted
here, so root only). A file written from outside until the kernel says ENOSPC fills it, while a
task runs and then ends: a submission is refused with 507 naming what is full (through the API
and through `pai`), never a 500. Once the file is gone the platform takes submissions again by
itself, without a new `pai up` (the supervisor restarts a bus the full disk left wedged), and
runs them; the job that ended while the disk was full ends as it should, and what was submitted
before is still there.
"""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.platform import ADMIN_PASSWORD, Cli, job_yaml, running_platform
from tests.support.waiting import eventually, polled

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small filesystem needs root"),
]

SIZE = "200M"
RECOVERY_WITHIN = 30.0
# The supervisor looks at the bus's disk every second; writes made after the task's end meet
# the full disk within this (the orchestrator's state and events, the read model's rows).
WRITES_MEET_THE_FULL_DISK = 3.0


@pytest.fixture
def small_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of SIZE mounted for the test, unmounted after it whatever happened."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    options = f"size={SIZE},mode=0700"
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)], check=True)
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], check=False).returncode != 0:
            # A task's process may still hold a directory there; it ends with the platform.
            subprocess.run(["umount", "-l", str(mount_point)], check=True)


def fill(path: Path) -> int:
    """Write ``path`` until the filesystem has no block left; the bytes written."""
    written = 0
    for size in (1 << 20, 4096, 1):  # each size takes what the larger one left
        with path.open("ab", buffering=0) as out:
            while True:
                try:
                    written += out.write(b"\0" * size) or 0
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    return written


async def submit(api: httpx.AsyncClient, name: str) -> httpx.Response:
    quick = job_yaml(name, {"main": {"commands": [f"echo {name}"]}})
    return await api.post("/api/v2/jobs", content=quick, headers={"Content-Type": "text/yaml"})


async def test_a_full_data_dir_refuses_submissions_with_507_and_the_platform_recovers_once_it_is_freed(
    small_filesystem: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"  # outside the small filesystem: touched while it is full
    async with running_platform(small_filesystem / "data") as platform:
        cli = Cli(platform.info.api_url, tmp_path / "config")
        code, _, err = await cli.run("login", "--user", "admin", env={"PAI_PASSWORD": ADMIN_PASSWORD})
        assert code == 0, err
        job_file = tmp_path / "while-full-cli.yaml"
        job_file.write_text(job_yaml("while-full-cli", {"main": {"commands": ["echo cli"]}}))
        before = await platform.submit(job_yaml("before-fill", {"main": {"commands": ["echo before"]}}))
        assert (await platform.completed(before)).state == "SUCCEEDED"
        waiting = f"while [ ! -f {gate} ]; do sleep 0.05; done"
        across = await platform.submit(job_yaml("across-the-fill", {"main": {"commands": [waiting]}}))
        await platform.watcher.wait_for("task.started", across)

        filler = small_filesystem / "filler"
        fill(filler)
        assert os.statvfs(small_filesystem).f_bavail == 0

        refused = await submit(platform.api, "while-full")
        assert refused.status_code == 507, refused.text
        body = refused.json()
        assert body["code"] == "InsufficientStorageError", body
        assert "no space left on device" in body["message"], body
        assert "the database" in body["message"] or "the message bus" in body["message"], body
        assert "Free space" in body["hint"], body
        code, out, err = await cli.run("job", "submit", str(job_file))
        assert code != 0, out
        assert "no space left on device" in err, err
        assert "Free space" in err, err

        # The running task ends while the disk is full: its end has to be written somewhere.
        gate.touch()
        await eventually(polled(platform.embedded.running_tasks), lambda running: running == 0, within=30)
        await asyncio.sleep(WRITES_MEET_THE_FULL_DISK)  # the platform's own writes; nothing to await

        bus = platform.child("nats")
        filler.unlink()
        freed = time.monotonic()
        answers: list[int] = []
        while True:
            answer = await submit(platform.api, "after-fill")
            answers.append(answer.status_code)
            if answer.status_code == 202 or time.monotonic() - freed > RECOVERY_WITHIN:
                break
            await asyncio.sleep(0.5)  # a person's retry; there is no event to await
        accepted_after = time.monotonic() - freed
        assert answer.status_code == 202, f"answers once the space was freed: {answers}; {answer.text}"
        after = str(answer.json()["jobId"])
        assert (await platform.completed(after)).state == "SUCCEEDED"
        succeeded_after = time.monotonic() - freed
        assert (await platform.completed(across)).state == "SUCCEEDED"
        print(
            f"space freed: submission accepted after {accepted_after:.1f}s (answers {answers}), "
            f"that job SUCCEEDED after {succeeded_after:.1f}s; bus restarts for the full disk: "
            f"{bus.revivals}"
        )

        # Nothing submitted before is lost; nothing refused was kept.
        detail = await platform.detail("after-fill")
        assert detail["jobStatus"]["state"] == "SUCCEEDED", detail
        states = {job["name"]: job["state"] for job in (await platform.api.get("/api/v2/jobs")).json()}
        assert states == {
            "before-fill": "SUCCEEDED",
            "across-the-fill": "SUCCEEDED",
            "after-fill": "SUCCEEDED",
        }
