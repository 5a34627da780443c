"""A task cannot take the disk the platform's bus and database live on.

The data dir is on a small filesystem of its own (a 300 MB tmpfs). A task writes, a megabyte at
a time, toward 400 MB in its work dir (on the host), or in its image's /tmp (in its container's
own layer, in the task's folder): past its share (a quarter of what the filesystem keeps
for tasks) the orchestrator stops it, its job FAILS with UserContainerDiskLimitExceeded (-1210,
not retried) and its work dir is removed; the filesystem never fills, and the next job runs.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from libs.protocol.capacity import disk_reserve_mb, task_disk_mb
from tests.e2e.platform import job_yaml, running_platform
from tests.support.images import local_image

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a filesystem for the data dir needs root"),
]

SIZE_MB = 300
FILL = "for i in $(seq 400); do head -c 1048576 /dev/zero >> big; sleep 0.01; done; sleep 60"


@pytest.fixture
def small_fs() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="pai-disk-") as base:
        os.chmod(base, 0o755)
        mount = Path(base) / "fs"
        mount.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={SIZE_MB}m,mode=0755", "tmpfs", str(mount)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.skip(f"no tmpfs can be mounted here: {done.stderr.strip()}")
        try:
            yield mount
        finally:
            subprocess.run(["umount", "-l", str(mount)], check=False)


def _free_mb(path: Path) -> int:
    fs = os.statvfs(path)
    return fs.f_bavail * fs.f_frsize // 2**20


@pytest.fixture
def image_or_host(request: pytest.FixtureRequest) -> Iterator[tuple[str | None, str]]:
    """(the job's image or None for the host, where the task writes): on the host in its work dir;
    in a local image in the image's own /tmp, which is its container's upper layer."""
    if request.param == "host":
        yield None, "."
        return
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (make setup installs it where it runs as root)")
    reference = f"localhost/pai-test-disk:{secrets.token_hex(6)}"
    with local_image(reference, "disk"):
        yield reference, "/tmp"


@pytest.mark.parametrize("image_or_host", ["host", "image"], indirect=True)
async def test_a_task_writing_past_its_share_is_stopped_and_the_platform_goes_on(
    small_fs: Path, image_or_host: tuple[str | None, str]
) -> None:
    image, folder = image_or_host
    share = task_disk_mb(SIZE_MB, disk_reserve_mb(SIZE_MB))
    assert share < SIZE_MB // 2
    env = {"PAI_TASK_ENGINE": "podman", "PAI_IMAGE_PULL": "never"} if image else {}
    async with running_platform(small_fs / "data", task_user="auto", env=env) as platform:
        lowest = _free_mb(small_fs)
        text = job_yaml("filler", {"main": {"commands": [FILL.replace("big", f"{folder}/big")]}})
        text = text.replace('"memoryMB": 128', '"memoryMB": 1024')
        job_id = await platform.submit(text.replace("python:3.11-slim", image) if image else text)
        completed = await platform.completed(job_id, within=120)
        lowest = min(lowest, _free_mb(small_fs))
        assert completed.state == "FAILED", completed
        detail = await platform.detail("filler")
        [task] = detail["taskRoles"]["main"]["taskStatuses"]
        assert task["containerExitCode"] == -1210, task
        assert f"past its share of {share} MB" in str(task["containerExitDiagnostics"]), task
        assert detail["jobStatus"]["retries"] == 0, detail  # a user's doing: not retried
        if image:
            assert "its container's own files" in str(task["containerExitDiagnostics"]), task
        # Its scratch space is given back (its overlay's upper layer too).
        assert not list((small_fs / "data" / "jobs" / job_id).rglob("big"))
        assert _free_mb(small_fs) > SIZE_MB // 2
        # The filesystem never filled: what the bus and the database need stayed free.
        assert lowest > 0

        text = job_yaml("after", {"main": {"commands": ["echo still here"]}})
        after = await platform.submit(text.replace("python:3.11-slim", image) if image else text)
        assert (await platform.completed(after)).state == "SUCCEEDED"
