"""Jobs run in their docker image through the machine's container engine (Podman here).

The test image is made on this machine, never pulled: busybox and bash, static builds from
Debian's packages, and a marker file, imported with `podman import`. Every platform here runs
with PAI_IMAGE_PULL=never, so nothing ever goes looking for a registry.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.orchestrator.adapters.engines import write_containers_conf
from services.orchestrator.core.containers import LABEL_JOB
from tests.e2e.platform import Platform, job_yaml, running_platform
from tests.support.waiting import eventually, polled

pytestmark = pytest.mark.timeout(240)

ENGINE_ENV = {"PAI_TASK_ENGINE": "podman", "PAI_IMAGE_PULL": "never"}


def _static_binaries(into: Path) -> tuple[Path, Path]:
    """busybox and bash, static: from Debian's packages (downloaded, unpacked), else the host's."""
    installed = (Path("/bin/busybox"), Path("/bin/bash-static"))
    if all(p.exists() for p in installed) and _is_static(installed[0]):
        return installed
    subprocess.run(
        ["apt-get", "download", "busybox-static", "bash-static"], cwd=into, check=True, capture_output=True
    )
    root = into / "unpacked"
    for deb in into.glob("*.deb"):
        subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)
    return root / "bin" / "busybox", root / "bin" / "bash-static"


def _is_static(binary: Path) -> bool:
    out = subprocess.run(["file", "-L", str(binary)], capture_output=True, text=True, check=False).stdout
    return "statically linked" in out or not out  # no `file`: trust the static package's name


def _podman_env(conf_dir: Path) -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(write_containers_conf(conf_dir))}


@pytest.fixture(scope="module")
def marker_image() -> Iterator[tuple[str, str]]:
    """(image reference, marker) of a local busybox+bash image holding /pai-marker."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (make setup installs it where it runs as root)")
    if os.geteuid() != 0:
        pytest.skip("the container engine tests run rootful podman: run them as root")
    marker = f"marker-{secrets.token_hex(6)}"
    reference = f"localhost/pai-test-marker:{marker}"
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        busybox, bash = _static_binaries(work)
        root = work / "root"
        (root / "bin").mkdir(parents=True)
        (root / "tmp").mkdir(mode=0o1777)
        shutil.copy(busybox, root / "bin" / "busybox")
        shutil.copy(bash, root / "bin" / "bash")
        applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True)
        for applet in applets.stdout.split():
            if not (root / "bin" / applet).exists():
                (root / "bin" / applet).symlink_to("busybox")
        (root / "pai-marker").write_text(marker + "\n")
        archive = work / "image.tar"
        with tarfile.open(archive, "w") as tar:
            tar.add(root, arcname=".")
        env = _podman_env(work)
        imported = subprocess.run(
            ["podman", "import", "--quiet", str(archive), reference], env=env, capture_output=True, text=True
        )
        if imported.returncode != 0:
            pytest.skip(f"podman cannot import an image here: {imported.stderr.strip()[-300:]}")
        try:
            yield reference, marker
        finally:
            subprocess.run(["podman", "rmi", "--force", reference], env=env, capture_output=True, check=False)


def _image_job(name: str, image: str, command: str, **top: object) -> str:
    return job_yaml(name, {"main": {"commands": [command]}}, **top).replace("python:3.11-slim", image)


def _containers_of(job_id: str, conf_dir: Path) -> list[str]:
    done = subprocess.run(
        ["podman", "ps", "--all", "--filter", f"label={LABEL_JOB}={job_id}", "--format", "{{.Names}}"],
        env=_podman_env(conf_dir),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


async def _task_of(platform: Platform, name: str) -> dict[str, object]:
    detail = await platform.detail(name)
    [task] = detail["taskRoles"]["main"]["taskStatuses"]
    return dict(task)


async def test_a_job_runs_in_its_image_and_records_the_digest(
    tmp_path: Path, marker_image: tuple[str, str]
) -> None:
    image, marker = marker_image
    command = "cat /pai-marker; if [ -e /usr/bin/python3 ]; then echo host-python; else echo no-python; fi"
    async with running_platform(tmp_path / "data", env=ENGINE_ENV) as platform:
        job_id = await platform.submit(_image_job("in-image", image, command))
        assert (await platform.completed(job_id)).state == "SUCCEEDED"
        log = await platform.log("in-image", "main", 0)
        assert marker in log
        assert "no-python" in log
        assert "host-python" not in log
        task = await _task_of(platform, "in-image")
        digest = str(task["imageDigest"])
        assert digest.startswith("localhost/pai-test-marker@sha256:"), digest
        assert "through podman" in str(task["executorNote"])
        assert _containers_of(job_id, tmp_path) == []  # removed once it ended


async def test_an_absent_image_fails_the_task_once_with_254(tmp_path: Path) -> None:
    async with running_platform(tmp_path / "data", env=ENGINE_ENV) as platform:
        job_id = await platform.submit(
            _image_job("no-image", "localhost/pai-test-absent:never-built", "echo ran", jobRetryCount=2)
        )
        completed = await platform.completed(job_id, within=60)
        assert completed.state == "FAILED"
        task = await _task_of(platform, "no-image")
        assert task["containerExitCode"] == 254
        assert task["containerExitSpec"]["phrase"] == "ContainerImageNotExists"  # type: ignore[index]
        assert "PAI_IMAGE_PULL=never" in str(task["containerExitDiagnostics"])
        detail = await platform.detail("no-image")
        assert detail["jobStatus"]["retries"] == 0  # permanent: never retried


async def test_a_job_stopped_mid_run_leaves_no_container(
    tmp_path: Path, marker_image: tuple[str, str]
) -> None:
    image, _ = marker_image
    command = "trap 'echo stopping; exit 143' TERM; echo up; sleep 300 & wait"
    async with running_platform(tmp_path / "data", env=ENGINE_ENV) as platform:
        job_id = await platform.submit(_image_job("stopped", image, command))
        await platform.watcher.wait_for("task.started", job_id)
        await eventually(polled(lambda: _containers_of(job_id, tmp_path)), bool, within=30)
        stopped = await platform.api.put("/api/v2/jobs/admin~stopped/executionType", json={"value": "STOP"})
        assert stopped.status_code in (200, 202), stopped.text
        assert (await platform.completed(job_id)).state == "STOPPED"
        await eventually(
            polled(lambda: _containers_of(job_id, tmp_path)), lambda names: names == [], within=30
        )


async def test_the_orchestrator_killed_mid_task_adopts_it_and_reports_its_end_once(
    tmp_path: Path, marker_image: tuple[str, str]
) -> None:
    image, _ = marker_image
    command = "echo ran >> ran.log; while [ ! -f gate ]; do sleep 0.05; done; echo done"
    async with running_platform(tmp_path / "data", env=ENGINE_ENV) as platform:
        job_id = await platform.submit(_image_job("adopted", image, command))
        await platform.watcher.wait_for("task.started", job_id)
        ran = await eventually(
            polled(lambda: next((tmp_path / "data").glob("**/work/ran.log"), None)), bool, within=30
        )
        assert ran is not None
        orchestrator = platform.child("orchestrator")
        old_pid = orchestrator.process.pid
        os.kill(old_pid, signal.SIGKILL)
        await eventually(
            polled(lambda: orchestrator.process.pid if orchestrator.process else None),
            lambda pid: pid not in (None, old_pid) and orchestrator.restarts >= 1,
        )
        (ran.parent / "gate").touch()
        assert (await platform.completed(job_id)).state == "SUCCEEDED"
        assert ran.read_text() == "ran\n"  # the container ran once
        assert len(platform.watcher.of("task.started", job_id)) == 1
        assert len(platform.watcher.of("task.completed", job_id)) == 1
        assert _containers_of(job_id, tmp_path) == []
