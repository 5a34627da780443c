"""The runc runner's bundles against the machine's Podman and runc: one template per image, a task's
overlay mounted once however often its start is tried, and nothing left once it is removed."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.orchestrator.adapters.bundling import (
    BUNDLE_FILE,
    ROOTFS,
    UPPER,
    Bundles,
    overlays_under,
    remove_rootfs,
)
from services.orchestrator.adapters.engines import Engine, detect_engine, resolve_image
from services.orchestrator.core.containers import ContainerPlan, container_name
from tests.support.images import local_image

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="image mounts and overlays need root"),
]


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    reference = f"localhost/pai-test-bundle:{secrets.token_hex(6)}"
    with local_image(reference, "bundled"):
        yield reference


def _engine(data_dir: Path) -> Engine:
    try:
        engine = detect_engine("podman", data_dir, "runc").engine
    except ValueError as exc:
        pytest.skip(f"runc does not run Podman's containers here: {exc}")
    assert engine is not None
    return engine


def _task(data_dir: Path, n: int) -> tuple[Path, Path, Path]:
    directory = data_dir / "jobs" / f"task-{n}"
    work, private = directory / "work", directory / "private"
    work.mkdir(parents=True)
    private.mkdir(mode=0o700)
    return directory, work, private


async def test_a_task_gets_its_overlay_once_and_leaves_nothing_once_removed(
    tmp_path: Path, image: str
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    engine = _engine(data_dir)
    bundles = Bundles(engine, data_dir, "test")
    made = 0
    make = bundles._make_template

    async def counted(plan: ContainerPlan) -> object:
        nonlocal made
        made += 1
        return await make(plan)

    bundles._make_template = counted  # type: ignore[method-assign,assignment]
    resolved = await resolve_image(engine, image, "never")
    tasks = [_task(data_dir, n) for n in range(3)]
    try:

        def plan(n: int) -> ContainerPlan:
            return ContainerPlan(
                engine="podman",
                image=resolved.run,
                name=container_name("job", 0, "main", n, 0),
                user="1800000001:1800000001",
                work_dir=str(tasks[n][1]),
                labels=(),
                memory_mb=256,
                cpus=1,
                pids=128,
            )

        configs = await asyncio.gather(*(bundles.prepare(plan(n), d, p) for n, (d, _, p) in enumerate(tasks)))
        assert made == 1  # three tasks of one image at once: one template
        assert sorted(overlays_under(data_dir)) == sorted(d / ROOTFS for d, _, _ in tasks)
        directory, _, private = tasks[0]
        assert (directory / ROOTFS / "pai-marker").read_text() == "bundled\n"
        config = json.loads(configs[0].read_text())
        assert configs[0] == private / BUNDLE_FILE
        assert config["root"]["path"] == str(directory / ROOTFS)
        assert config["process"]["user"]["uid"] == 1800000001
        assert config["linux"]["seccomp"]["syscalls"]  # the engine's profile
        # The upper layer is the overlay's root: the image's, so every user may walk it.
        assert (directory / UPPER).stat().st_mode & 0o777 == (directory / ROOTFS).stat().st_mode & 0o777
        assert (directory / ROOTFS).stat().st_mode & 0o005 == 0o005

        # A start tried again (its runtime never began): mounted once, not twice.
        (directory / ROOTFS / "left-by-the-first").write_text("x")
        await bundles.prepare(plan(0), directory, private)
        assert overlays_under(directory) == [directory / ROOTFS]

        for d, _, p in tasks:
            remove_rootfs(d, p)
            assert not (d / UPPER).exists()
            assert not (d / ROOTFS).exists()
        assert overlays_under(data_dir) == []
        assert made == 1
    finally:
        for d, _, p in tasks:
            remove_rootfs(d, p)
        await bundles.close()
