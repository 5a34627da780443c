"""A container image made on this machine, never pulled: busybox and bash (static builds from
Debian's packages) and a marker file, imported with `podman import`."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.orchestrator.adapters.engines import write_containers_conf


class ImageError(Exception):
    """The image could not be made here (no Debian packages, podman refusing the import)."""


def podman_env(conf_dir: Path) -> dict[str, str]:
    """The environment of a podman call as the platform makes it (its own containers.conf)."""
    return {**os.environ, "CONTAINERS_CONF": str(write_containers_conf(conf_dir))}


def _static_binaries(into: Path) -> tuple[Path, Path]:
    """busybox and bash, static: Debian's busybox-static and bash-static, installed or downloaded."""
    installed = (Path("/bin/busybox"), Path("/bin/bash-static"))
    if all(p.exists() for p in installed):
        return installed
    downloaded = subprocess.run(
        ["apt-get", "download", "busybox-static", "bash-static"], cwd=into, capture_output=True, text=True
    )
    if downloaded.returncode != 0:
        raise ImageError(f"apt-get download busybox-static bash-static: {downloaded.stderr.strip()[-300:]}")
    root = into / "unpacked"
    for deb in into.glob("*.deb"):
        subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)
    return root / "bin" / "busybox", root / "bin" / "bash-static"


def build_marker_image(reference: str, marker: str, *, shell: bool = True) -> None:
    """Import ``reference``: busybox applets and bash in /bin (none without ``shell``), ``marker``
    in /pai-marker."""
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        root = work / "root"
        (root / "bin").mkdir(parents=True)
        (root / "tmp").mkdir()
        (root / "tmp").chmod(0o1777)  # as an image's /tmp is: every user's (mkdir's mode is umasked)
        (root / "pai-marker").write_text(marker + "\n")
        if shell:
            _add_shell(work, root)
        import_root(root, reference, work)


def import_root(root: Path, reference: str, work: Path) -> None:
    """``podman import`` of the tree ``root`` as ``reference`` (``work`` holds the archive)."""
    archive = work / "image.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(root, arcname=".")
    imported = subprocess.run(
        ["podman", "import", "--quiet", str(archive), reference],
        env=podman_env(work),
        capture_output=True,
        text=True,
    )
    if imported.returncode != 0:
        raise ImageError(f"podman import: {imported.stderr.strip()[-300:]}")


def _add_shell(work: Path, root: Path) -> None:
    busybox, bash = _static_binaries(work)
    shutil.copy(busybox, root / "bin" / "busybox")
    shutil.copy(bash, root / "bin" / "bash")
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True)
    for applet in applets.stdout.split():
        if not (root / "bin" / applet).exists():
            (root / "bin" / applet).symlink_to("busybox")


def remove_image(reference: str) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(
            ["podman", "rmi", "--force", reference],
            env=podman_env(Path(scratch)),
            capture_output=True,
            check=False,
        )


@contextlib.contextmanager
def local_image(reference: str, marker: str) -> Iterator[str]:
    """``build_marker_image`` for a test: the test skips where no image can be made here, and
    the image is removed after it."""
    try:
        build_marker_image(reference, marker)
    except ImageError as exc:
        pytest.skip(f"no test image can be made here: {exc}")
    try:
        yield reference
    finally:
        remove_image(reference)
