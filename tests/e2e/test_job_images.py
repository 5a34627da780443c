"""Jobs run in their docker image through the machine's container engine (Podman here).

The test image is made on this machine, never pulled: busybox and bash, static builds from
Debian's packages, and a marker file, imported with `podman import`. Every platform here runs
with PAI_IMAGE_PULL=never, so nothing ever goes looking for a registry. The containers run as the
platform runs them by default here (bubblewrap on the executor's bundles, PAI_CONTAINER_RUNNER
auto); a stop and an orchestrator's death mid-task are tried with runc itself and ``podman run``
too.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.orchestrator.adapters.bundling import STATE_DIR, overlays_under
from services.orchestrator.adapters.engines import Engine, EngineError, resolve_image
from services.orchestrator.adapters.isolation import engine_line
from services.orchestrator.core.containers import LABEL_JOB
from tests.e2e.platform import ADMIN_PASSWORD, Cli, Platform, job_yaml, running_platform
from tests.e2e.test_storage import storages_file
from tests.portal.conftest import CHROMIUM_ARGS, chromium_or_skip
from tests.support.images import build_marker_image, local_image, podman_env, remove_image
from tests.support.sandboxes import bwrap_processes
from tests.support.waiting import eventually, polled

pytestmark = pytest.mark.timeout(240)

ENGINE_ENV = {"PAI_TASK_ENGINE": "podman", "PAI_IMAGE_PULL": "never"}
RUNNERS = pytest.mark.parametrize("runner", ["bwrap", "runc", "engine"])


@pytest.fixture(scope="module")
def marker_image() -> Iterator[tuple[str, str]]:
    """(image reference, marker) of a local busybox+bash image holding /pai-marker."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (make setup installs it where it runs as root)")
    if os.geteuid() != 0:
        pytest.skip("the container engine tests run rootful podman: run them as root")
    marker = f"marker-{secrets.token_hex(6)}"
    reference = f"localhost/pai-test-marker:{marker}"
    with local_image(reference, marker):
        yield reference, marker


def _image_job(name: str, image: str, command: str, **top: object) -> str:
    return job_yaml(name, {"main": {"commands": [command]}}, **top).replace("python:3.11-slim", image)


def _containers_of(job_id: str, conf_dir: Path) -> list[str]:
    """The job's containers Podman knows, and those runc knows in the platform's state
    (``runc list``); the platform's data dir is ``conf_dir/data``."""
    done = subprocess.run(
        ["podman", "ps", "--all", "--filter", f"label={LABEL_JOB}={job_id}", "--format", "{{.Names}}"],
        env=podman_env(conf_dir),
        capture_output=True,
        text=True,
        check=True,
    )
    return (
        done.stdout.split()
        + [name for name in runc_list(conf_dir / "data") if job_id in name]
        + sandboxes_of(job_id)
    )


def sandboxes_of(job_id: str) -> list[str]:
    """The bubblewrap processes that run a script of the job (their arguments name its work dir)."""
    return bwrap_processes(job_id)


def runc_list(data_dir: Path) -> list[str]:
    """``runc --root <the platform's state> list``: every container runc runs for the platform."""
    state = data_dir / STATE_DIR
    if not state.is_dir():
        return []
    done = subprocess.run(
        ["runc", "--root", str(state), "list", "--quiet"], capture_output=True, text=True, check=True
    )
    return done.stdout.split()


def _left_behind(job_id: str, conf_dir: Path) -> list[str]:
    """Containers of the job and overlays under the data dir: none once its tasks are over."""
    return _containers_of(job_id, conf_dir) + [str(p) for p in overlays_under(conf_dir / "data")]


async def _task_of(platform: Platform, name: str) -> dict[str, object]:
    detail = await platform.detail(name)
    [task] = detail["taskRoles"]["main"]["taskStatuses"]
    return dict(task)


async def test_a_job_runs_in_its_image_and_records_the_digest(
    tmp_path: Path, marker_image: tuple[str, str]
) -> None:
    image, marker = marker_image
    command = "cat /pai-marker; if [ -e /usr/bin/python3 ]; then echo host-python; else echo no-python; fi"
    async with running_platform(tmp_path / "data", env=ENGINE_ENV, task_user="auto") as platform:
        job_id = await platform.submit(_image_job("in-image", image, command))
        assert (await platform.completed(job_id)).state == "SUCCEEDED"
        log = await platform.log("in-image", "main", 0)
        assert marker in log
        assert "no-python" in log
        assert "host-python" not in log
        task = await _task_of(platform, "in-image")
        digest = str(task["imageDigest"])
        assert digest.startswith("localhost/pai-test-marker@sha256:"), digest
        assert "through podman and bubblewrap" in str(task["executorNote"])  # bubblewrap, by default
        assert _left_behind(job_id, tmp_path) == []  # removed once it ended, its overlay unmounted

        # Run again on the same bits: the clone names the image by the digest it ran.
        cli = Cli(platform.info.api_url, tmp_path / "config")
        code, _, err = await cli.run("login", "--user", "admin", env={"PAI_PASSWORD": ADMIN_PASSWORD})
        assert code == 0, err
        code, out, err = await cli.run("job", "clone", "in-image", "--pin-images", "--name", "pinned")
        assert code == 0, err
        assert f"uri: {digest}" in out
        assert "name: pinned" in out
        code, out, err = await cli.run(
            "job", "clone", "in-image", "--pin-images", "--name", "pinned", "--submit"
        )
        assert code == 0, err
        pinned = await _task_of(platform, "pinned")
        assert pinned["taskState"] == "SUCCEEDED"
        assert pinned["imageDigest"] == digest
        await _portal_clone_is_pinned(platform, "in-image", digest)


async def _portal_clone_is_pinned(platform: Platform, name: str, digest: str) -> None:
    """The job's page offers a clone on the same images; the submit page it opens names the digest."""
    executable = chromium_or_skip()
    from playwright.async_api import async_playwright

    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page()
            base = platform.info.portal_url.rstrip("/")
            await page.goto(base + "/")
            await page.fill("#username", "admin")
            await page.fill("#password", ADMIN_PASSWORD)
            await page.click("button[type=submit]")
            await page.wait_for_url("**/home.html")
            await page.goto(f"{base}/job-detail.html?username=admin&jobName={name}")
            await page.click("#clone-pinned")
            await page.wait_for_selector("body[data-ready=true]")
            text = await page.input_value("#yaml")
            assert f"uri: {digest}" in text
            assert "Images pinned to the digests the job ran" in await page.inner_text("#submit-status")
        finally:
            await browser.close()


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


@RUNNERS
async def test_a_job_stopped_mid_run_leaves_no_container(
    tmp_path: Path, marker_image: tuple[str, str], runner: str
) -> None:
    image, _ = marker_image
    command = "trap 'echo stopping; exit 143' TERM; echo up; sleep 300 & wait"
    env = {**ENGINE_ENV, "PAI_CONTAINER_RUNNER": runner}
    async with running_platform(tmp_path / "data", env=env, task_user="auto") as platform:
        job_id = await platform.submit(_image_job("stopped", image, command))
        await platform.watcher.wait_for("task.started", job_id)
        await eventually(polled(lambda: _containers_of(job_id, tmp_path)), bool, within=30)
        assert (runc_list(tmp_path / "data") != []) == (runner == "runc")
        assert (sandboxes_of(job_id) != []) == (runner == "bwrap")
        stopped = await platform.api.put("/api/v2/jobs/admin~stopped/executionType", json={"value": "STOP"})
        assert stopped.status_code in (200, 202), stopped.text
        assert (await platform.completed(job_id)).state == "STOPPED"
        await eventually(polled(lambda: _left_behind(job_id, tmp_path)), lambda left: left == [], within=30)


@RUNNERS
async def test_the_orchestrator_killed_mid_task_adopts_it_and_reports_its_end_once(
    tmp_path: Path, marker_image: tuple[str, str], runner: str
) -> None:
    image, _ = marker_image
    command = "echo ran >> ran.log; while [ ! -f gate ]; do sleep 0.05; done; echo done"
    env = {**ENGINE_ENV, "PAI_CONTAINER_RUNNER": runner}
    async with running_platform(tmp_path / "data", env=env, task_user="auto") as platform:
        job_id = await platform.submit(_image_job("adopted", image, command))
        await platform.watcher.wait_for("task.started", job_id)
        ran = await eventually(
            polled(lambda: next((tmp_path / "data").glob("**/ran.log"), None)), bool, within=30
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
        assert _left_behind(job_id, tmp_path) == []


@RUNNERS
async def test_a_task_whose_runtime_dies_leaves_no_container(
    tmp_path: Path, marker_image: tuple[str, str], runner: str
) -> None:
    """Its container outlives it (under conmon, or under an orphaned runc): the executor removes
    it, and the task's overlay, when it sees the runtime gone."""
    image, _ = marker_image
    env = {**ENGINE_ENV, "PAI_CONTAINER_RUNNER": runner}
    async with running_platform(tmp_path / "data", env=env, task_user="auto") as platform:
        job_id = await platform.submit(_image_job("orphaned", image, "echo up; sleep 300"))
        await platform.watcher.wait_for("task.started", job_id)
        await eventually(polled(lambda: _containers_of(job_id, tmp_path)), bool, within=30)
        pid = next((tmp_path / "data" / "jobs" / job_id).glob("attempt-0/main-0/try-0/pid"))
        os.kill(int(pid.read_text()), signal.SIGKILL)
        await platform.watcher.wait_for("task.completed", job_id)
        first = "-0-main-0-0"  # the first attempt's; a retry's are its own
        await eventually(
            polled(lambda: [n for n in _left_behind(job_id, tmp_path) if first in n or "/attempt-0/" in n]),
            lambda left: left == [],
            within=30,
        )
        # A runtime gone is the platform's failure: the job is tried again. Stopped, it leaves none.
        stopped = await platform.api.put("/api/v2/jobs/admin~orphaned/executionType", json={"value": "STOP"})
        assert stopped.status_code in (200, 202), stopped.text
        await platform.completed(job_id)
        await eventually(polled(lambda: _left_behind(job_id, tmp_path)), lambda left: left == [], within=30)


async def test_an_image_without_a_shell_fails_with_openpais_start_cmd_not_found(
    tmp_path: Path, marker_image: tuple[str, str]
) -> None:
    shell_less = "localhost/pai-test-no-shell:1"
    build_marker_image(shell_less, "no-shell", shell=False)
    try:
        async with running_platform(tmp_path / "data", env=ENGINE_ENV) as platform:
            job_id = await platform.submit(_image_job("no-shell", shell_less, "echo ran"))
            assert (await platform.completed(job_id)).state == "FAILED"
            task = await _task_of(platform, "no-shell")
            assert task["containerExitCode"] == -1203
            assert task["containerExitSpec"]["phrase"] == "ContainerDockerStartCmdNotFound"  # type: ignore[index]
            assert "has no /bin/sh" in str(task["containerExitDiagnostics"])
    finally:
        remove_image(shell_less)


def test_pai_up_names_the_engine_and_the_pull_policy(tmp_path: Path, marker_image: tuple[str, str]) -> None:
    line = engine_line(tmp_path, {"PAI_TASK_ENGINE": "auto", "PAI_IMAGE_PULL": "never"})
    assert line == (
        "tasks run in their docker images: podman's images and configuration, run by bubblewrap in a "
        "user namespace of the tenant's uid; images pulled: never (PAI_IMAGE_PULL)"
    )
    line = engine_line(tmp_path, {"PAI_IMAGE_PULL": "never", "PAI_CONTAINER_RUNNER": "engine"})
    assert line == (
        "tasks run in their docker images through podman (runc); images pulled: never (PAI_IMAGE_PULL)"
    )
    line = engine_line(tmp_path, {"PAI_IMAGE_PULL": "never", "PAI_CONTAINER_RUNNER": "runc"})
    runc = "tasks run in their docker images: podman's images, run by runc itself"
    assert line == f"{runc}; images pulled: never (PAI_IMAGE_PULL)"
    assert "must be auto, bwrap, runc or engine" in engine_line(tmp_path, {"PAI_CONTAINER_RUNNER": "crun"})
    assert engine_line(tmp_path, {"PAI_TASK_ENGINE": "host"}) == "tasks run on the host: PAI_TASK_ENGINE=host"
    assert "must be auto, podman, docker or host" in engine_line(tmp_path, {"PAI_TASK_ENGINE": "lxc"})


async def test_an_engine_gone_is_a_platform_failure_that_names_it(tmp_path: Path) -> None:
    gone = Engine("podman", str(tmp_path / "no-such-podman"), "runc")
    with pytest.raises(EngineError, match="the container engine podman cannot be run") as failed:
        await resolve_image(gone, "localhost/anything:1", "never")
    assert failed.value.exit_code == 245  # RuntimeConfineFailed: transient, retried without counting


async def test_a_container_past_its_memory_ends_with_openpais_oom_code(
    tmp_path: Path, marker_image: tuple[str, str]
) -> None:
    image, _ = marker_image
    # 400 MB held by bash in a task of 128 MB: the task's group, the container's parent, kills it.
    command = "x=$(head -c 400000000 /dev/zero | tr '\\0' a); echo survived ${#x}"
    async with running_platform(tmp_path / "data", env=ENGINE_ENV, task_user="auto") as platform:
        job_id = await platform.submit(_image_job("hungry", image, command))
        assert (await platform.completed(job_id)).state == "FAILED"
        task = await _task_of(platform, "hungry")
        assert task["containerExitCode"] == -1200
        assert "memory limit of 128 MiB" in str(task["containerExitDiagnostics"])
        assert "survived" not in await platform.log("hungry", "main", 0)


async def test_a_granted_storage_is_mounted_in_the_container_at_its_mount_path(
    tmp_path: Path, marker_image: tuple[str, str]
) -> None:
    image, _ = marker_image
    env = {**ENGINE_ENV, "PAI_STORAGES_FILE": str(storages_file(tmp_path))}
    async with running_platform(tmp_path / "data", env=env) as platform:
        plugin = {
            "plugin": "teamwise_storage",
            "parameters": {"storages": [{"name": "team", "mountPath": "/mnt/team"}]},
        }
        text = _image_job(
            "mounted",
            image,
            "cat /mnt/team/sets/hello.txt",
            extras={"com.microsoft.pai.runtimeplugin": [plugin]},
        )
        assert (await platform.completed(await platform.submit(text))).state == "SUCCEEDED"
        assert "from the storage" in await platform.log("mounted", "main", 0)


async def test_as_make_up_runs_them_a_present_image_runs_in_it_and_an_absent_one_on_the_host_saying_so(
    tmp_path: Path, marker_image: tuple[str, str]
) -> None:
    image, marker = marker_image
    # PAI_IMAGE_PULL is left at missing: what is not here would be pulled, but for make up's setting.
    env = {"PAI_TASK_ENGINE": "podman", "PAI_IMAGE_MISSING": "host"}
    async with running_platform(tmp_path / "data", env=env) as platform:
        here = await platform.submit(_image_job("here", image, "cat /pai-marker"))
        absent = "localhost/pai-test-absent:never-built"
        away = await platform.submit(_image_job("away", absent, "echo ran on the host"))
        assert (await platform.completed(here)).state == "SUCCEEDED"
        assert (await platform.completed(away)).state == "SUCCEEDED"
        assert marker in await platform.log("here", "main", 0)
        assert "through podman" in str((await _task_of(platform, "here"))["executorNote"])
        note = str((await _task_of(platform, "away"))["executorNote"])
        assert f"the docker image {absent} is not on this machine (PAI_IMAGE_MISSING=host)" in note, note
        assert "the commands run on the host instead" in note, note
        log = await platform.log("away", "main", 0)
        assert log.startswith("[pai] the docker image"), log
        assert "ran on the host" in log
