"""Tasks' containers run by runc itself: their bundles made, and everything of them removed.

``podman run`` for each command script costs a client, a monitor (conmon) and the OCI runtime:
some 150 ms of CPU on two cores. runc on a prepared bundle of the same configuration costs 40
(13 of them compiling the rules of Podman's seccomp profile for the 32-bit ABIs, which the
template drops: core/bundles.py native_abi_only), 27 without them. Where runc is Podman's
runtime on the machine (adapters/engines.py, PAI_CONTAINER_RUNNER), the local executor therefore
prepares each task's bundle itself and its runtime runs the scripts with ``runc run``
(runtime/container.py); Podman still holds the images, pulls them, names their digests, and
decides every security setting but one (the 32-bit ABIs above):

- the image's files: ``podman image mount`` (read-only), once per image for the executor's life;
- the task's root filesystem: an overlay of the task's own over them (``mount -t overlay``, made
  with the system call itself: ``rootfs-upper`` and ``rootfs-work`` in the task's directory);
- its configuration: once per image (and set of GPUs), Podman creates a container of it with
  the task's arguments (core/containers.py; ``--pull never``), ``podman init`` has it write its
  OCI configuration, the executor keeps that and copies of the files Podman made for it (hosts,
  resolv.conf, hostname), and removes the container; each task's is that template patched
  (core/bundles.py), written to the runtime's private folder.

Where bubblewrap runs the containers (the default where it can, core/image_sandboxes.py), the
same template and overlay serve: ``Bundles.sandbox`` says the task's configuration in
bubblewrap's words instead of writing it, with the mount points bubblewrap needs made in the
overlay, and the template's seccomp filter compiled once (adapters/seccomp_filters.py).

A task's end (its runtime ended, was stopped, or died with the orchestrator) removes every
container of it runc still knows (``runc delete --force``: a killed runtime leaves its container
behind), unmounts its overlay and removes its upper layer: what the task changed outside its work
dir goes with it, as with ``podman run --rm``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import json
import os
import platform
import secrets
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog

from runtime.container import make_mount_point, run_prefix
from runtime.spec import Bind, ImageSandbox
from services.orchestrator.adapters.engines import Engine, EngineError
from services.orchestrator.adapters.seccomp_filters import ENTRY_CALLS, SeccompError, compile_filter
from services.orchestrator.core.bundles import (
    TemplateError,
    bundle_config,
    engine_files,
    native_abi_only,
    template_arguments,
)
from services.orchestrator.core.containers import LABEL_PLATFORM, ContainerPlan
from services.orchestrator.core.image_sandboxes import STAGE, image_sandbox
from services.orchestrator.core.sandboxes import SandboxTools

log = structlog.get_logger(__name__)

STATE_DIR = "runc"
"""In the data dir: runc's state of the platform's containers (``runc --root``)."""
TEMPLATES_DIR = "runc-templates"
"""In the data dir: what the templates' configurations name (a work dir, the engine's files)."""
LABEL_TEMPLATE = "ai.pai.template"
ROOTFS, UPPER, WORK = "rootfs", "rootfs-upper", "rootfs-work"
BUNDLE_FILE = "bundle.json"
"""In the runtime's private folder: the task's OCI configuration."""
SECCOMP_FILE = "seccomp.bpf"
"""In a template's folder: its seccomp filter compiled, where bubblewrap runs the containers."""
ENTRY_SECCOMP_FILE = "seccomp-entry.bpf"
"""Beside it: the same with what `pai job exec`'s nsenter needs (seccomp_filters.ENTRY_CALLS)."""
BUNDLES_DIR = "bundles"
"""In the runtime's private folder: each script's bundle while it runs (runtime/running.py)."""
TEMPLATE_USER = "65534:65534"
CALL_TIMEOUT_S = 60.0
_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


class BundleError(EngineError):
    """A task's bundle could not be made: a platform failure, retried (the task did not run)."""


class NotForBubblewrap(BundleError):
    """The engine's configuration asks for what bubblewrap does not do (hooks, a capability): runc
    runs the task's containers instead."""


@dataclass(frozen=True)
class Template:
    """The engine's configuration of a container of one image, with what the patch needs."""

    config: dict[str, Any]
    work_dir: str
    files: dict[str, str]
    seccomp: Path | None = None
    """Its seccomp filter compiled (BPF), where bubblewrap runs the containers."""
    entry_seccomp: Path | None = None
    """The filter an exec into its containers runs under (None: the profile allows no entry)."""


def _check_option_path(path: str) -> str:
    if "," in path or ":" in path:
        raise BundleError(f"{path}: an overlay's layers cannot have a comma or a colon in their paths")
    return path


def _mounted(path: str) -> bool:
    """A mount point still (a stat of it and its parent: cheap enough for the event loop)."""
    return os.path.ismount(path)


def mount_overlay(lower: str, upper: Path, work: Path, target: Path) -> None:
    """``mount -t overlay overlay -o lowerdir=,upperdir=,workdir= target``, as the system call."""
    options = ",".join(
        f"{name}={_check_option_path(str(path))}"
        for name, path in (("lowerdir", lower), ("upperdir", upper), ("workdir", work))
    )
    if _libc.mount(b"overlay", os.fsencode(target), b"overlay", 0, options.encode()) != 0:
        code = ctypes.get_errno()
        raise BundleError(f"mount -t overlay overlay -o {options} {target}: {os.strerror(code)}")


def unmount(target: Path) -> None:
    """Unmount ``target`` if it is a mount point; detached where something still holds it."""
    path = os.fsencode(target)
    while os.path.ismount(target):
        if _libc.umount2(path, 0) == 0:
            continue
        code = ctypes.get_errno()
        if code == errno.EBUSY and _libc.umount2(path, _MNT_DETACH) == 0:
            continue
        if code in (errno.EINVAL, errno.ENOENT):
            return
        raise OSError(code, f"umount {target}: {os.strerror(code)}")


def overlays_under(root: Path) -> list[Path]:
    """The overlay mounts below ``root`` (from /proc/self/mountinfo)."""
    prefix = str(root.resolve()).rstrip("/") + "/"
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            target = fields[4].encode().decode("unicode_escape")
            kind = fields[fields.index("-") + 1]
            if kind == "overlay" and target.startswith(prefix):
                found.append(Path(target))
    return found


async def _run(program: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """The program's exit code, output and errors. Both are files, not pipes: ``podman init``
    leaves the container's monitor running with them, and a pipe would never end."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = await asyncio.create_subprocess_exec(
                program, *args, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env
            )
        except OSError as exc:
            raise EngineError(f"{program} cannot be run: {exc}") from exc
        try:
            code = await asyncio.wait_for(proc.wait(), CALL_TIMEOUT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise EngineError(f"{program} {args[0]} did not answer in {CALL_TIMEOUT_S:g}s") from None
        out.seek(0)
        err.seek(0)
        return code, out.read().decode(errors="replace"), err.read().decode(errors="replace")


def _last(text: str) -> str:
    return (text.strip().splitlines() or ["no message"])[-1][-300:]


def runc_containers(state: Path, name: str) -> list[str]:
    """The containers runc knows of a task (its state directory's entries, as ``runc list``)."""
    prefix = run_prefix(name)
    try:
        return sorted(entry for entry in os.listdir(state) if entry.startswith(prefix))
    except FileNotFoundError:
        return []


class Bundles:
    """The executor's side of the runc runner: image mounts and templates kept per image."""

    def __init__(self, engine: Engine, data_dir: Path, platform: str) -> None:
        self.engine = engine
        self.compiled = engine.runner == "bwrap"  # each template's seccomp filter compiled once
        self.state = data_dir / STATE_DIR
        self.templates_dir = data_dir / TEMPLATES_DIR
        self._platform = platform
        self._env = {**os.environ, **engine.env}
        # Image id -> the merged dir of its `podman image mount`.
        self._roots: dict[str, str] = {}
        self._templates: dict[tuple[str, tuple[int, ...], bool], asyncio.Future[Template]] = {}
        self._image_locks: dict[str, asyncio.Lock] = {}
        self._swept = False
        self.state.mkdir(mode=0o700, parents=True, exist_ok=True)

    async def _podman(self, *args: str) -> tuple[int, str, str]:
        return await _run(self.engine.program, *args, env=self._env)

    async def image_root(self, image: str) -> str:
        """The image's files, read-only (mounted once; again if someone unmounted them)."""
        root = self._roots.get(image)
        if root is not None and _mounted(root):
            return root
        async with self._image_locks.setdefault(image, asyncio.Lock()):
            root = self._roots.get(image)
            if root is not None and _mounted(root):
                return root
            code, out, err = await self._podman("image", "mount", image)
            if code != 0 or not out.strip():
                raise BundleError(f"podman image mount {image} failed: {_last(err)}")
            self._roots[image] = out.strip().splitlines()[-1]
            return self._roots[image]

    async def template(self, plan: ContainerPlan) -> Template:
        """The engine's configuration for containers of the plan's image (and GPUs), made once."""
        key = (plan.image, plan.gpus, plan.cdi)
        made = self._templates.get(key)
        if made is None or (made.done() and (made.cancelled() or made.exception() is not None)):
            made = self._templates[key] = asyncio.ensure_future(self._make_template(plan))
        return await asyncio.shield(made)

    async def _sweep(self) -> None:
        """Templates a killed orchestrator left behind (once per executor)."""
        if self._swept:
            return
        self._swept = True
        code, out, _ = await self._podman(
            "ps", "--all", "--filter", f"label={LABEL_TEMPLATE}={self._platform}", "--format", "{{.ID}}"
        )
        for ident in out.split() if code == 0 else []:
            await self._podman("rm", "--force", "--ignore", ident)

    async def _make_template(self, plan: ContainerPlan) -> Template:
        await self._sweep()
        token = secrets.token_hex(4)
        # One folder per image and GPUs, the same across restarts: the containers of tasks an
        # earlier orchestrator started still mount its files (rewritten in place, never removed).
        gpus = "-".join(str(n) for n in plan.gpus) + ("-cdi" if plan.cdi else "") if plan.gpus else "no-gpu"
        folder = self.templates_dir / f"{plan.image.removeprefix('sha256:')[:16]}-{gpus}"
        work = folder / "work"
        await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
        template = replace(
            plan,
            name=f"pai-template-{self._platform}-{token}",
            user=TEMPLATE_USER,
            work_dir=str(work),
            labels=((LABEL_PLATFORM, self._platform), (LABEL_TEMPLATE, self._platform)),
            cgroup_parent=None,
            mounts=(),
        )
        code, out, err = await self._podman(*template_arguments(template))
        if code != 0:
            raise BundleError(f"podman create (a template of {plan.image}) failed: {_last(err)}")
        ident = out.strip().splitlines()[-1]
        try:
            code, _, err = await self._podman("init", ident)
            if code != 0:
                raise BundleError(f"podman init (a template of {plan.image}) failed: {_last(err)}")
            code, out, err = await self._podman("inspect", "--format", "{{.OCIConfigPath}}", ident)
            if code != 0 or not out.strip():
                raise BundleError(f"podman inspect (a template of {plan.image}) failed: {_last(err)}")
            config = json.loads(await asyncio.to_thread(Path(out.strip()).read_bytes))
            config = native_abi_only(config, platform.machine())
            files = await asyncio.to_thread(self._keep_files, engine_files(config, ident), folder)
        finally:
            await self._podman("rm", "--force", "--ignore", ident)
        seccomp = entry = None
        profile = config.get("linux", {}).get("seccomp")
        if self.compiled and profile:
            seccomp = folder / SECCOMP_FILE
            try:
                program = await asyncio.to_thread(compile_filter, profile)
                await asyncio.to_thread(_write_private, seccomp, program)
            except (SeccompError, OSError) as exc:
                raise BundleError(f"the seccomp filter of {plan.image}'s containers: {exc}") from exc
            entry = folder / ENTRY_SECCOMP_FILE
            try:
                program = await asyncio.to_thread(compile_filter, profile, ENTRY_CALLS)
                await asyncio.to_thread(_write_private, entry, program)
            except (SeccompError, OSError) as exc:  # a profile refusing them outright: no exec
                log.warning("no seccomp filter for an exec into the image's containers", error=str(exc))
                entry = None
        log.info("a container template", image=plan.image, gpus=list(plan.gpus))
        return Template(config, str(work), files, seccomp, entry)

    @staticmethod
    def _keep_files(made: dict[str, str], folder: Path) -> dict[str, str]:
        """Copies of the files (and folders) the engine made for the template container. A copy
        an earlier executor made is rewritten only where it differs: running containers mount it."""
        kept: dict[str, str] = {}
        files = folder / "files"
        files.mkdir(exist_ok=True)
        for n, (target, source) in enumerate(sorted(made.items())):
            copy = files / f"{n}-{Path(target).name or 'root'}"
            if Path(source).is_dir():
                shutil.copytree(source, copy, symlinks=True, dirs_exist_ok=True)
            elif not copy.is_file() or copy.read_bytes() != Path(source).read_bytes():
                shutil.copy2(source, copy)
            kept[target] = str(copy)
        return kept

    async def prepare(self, plan: ContainerPlan, directory: Path, private: Path) -> Path:
        """The task's bundle: its overlay mounted, its configuration written; its path."""
        config, _ = await self._root(plan, directory)
        path = private / BUNDLE_FILE
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(json.dumps(config))  # the C encoder: json.dump's is Python's, 5x slower
        except OSError as exc:
            remove_rootfs(directory, private)
            raise BundleError(f"the task's container could not be prepared: {exc}") from exc
        return path

    async def sandbox(
        self, plan: ContainerPlan, directory: Path, private: Path, tools: SandboxTools
    ) -> ImageSandbox:
        """The task's container as bubblewrap runs it: its overlay mounted, with the mount points
        bubblewrap needs made in it (it runs as the tenant, who cannot make them in the image's
        folders), and the engine's configuration in bubblewrap's words."""
        config, template = await self._root(plan, directory)
        rootfs = directory / ROOTFS
        try:
            made = image_sandbox(config, tools, present=_present)
        except TemplateError as exc:
            remove_rootfs(directory, private)
            raise NotForBubblewrap(str(exc)) from exc
        try:
            _make_points(rootfs, made.mount_points)
            os.makedirs(STAGE, mode=0o755, exist_ok=True)
        except OSError as exc:
            remove_rootfs(directory, private)
            raise BundleError(f"the task's container could not be prepared: {exc}") from exc
        return ImageSandbox(
            argv=made.argv,
            env=made.env,
            entry=made.entry,
            rootfs=rootfs,
            stage=STAGE,
            binds=[Bind(source=source, target=target, read_only=ro) for source, target, ro in made.binds],
            seccomp=template.seccomp,
            entry_seccomp=template.entry_seccomp,
        )

    async def _root(self, plan: ContainerPlan, directory: Path) -> tuple[dict[str, Any], Template]:
        """The task's overlay mounted over its image, and its OCI configuration."""
        try:
            lower = await self.image_root(plan.image)
            template = await self.template(plan)
            rootfs = directory / ROOTFS
            upper, work = directory / UPPER, directory / WORK
            unmount(rootfs)  # a start that died before its runtime began left it
            config = bundle_config(
                template.config,
                plan,
                rootfs=str(rootfs),
                template_work_dir=template.work_dir,
                files=template.files,
            )
            for folder in (rootfs, upper, work):
                folder.mkdir(mode=0o700, exist_ok=True)
            # The overlay's root is its upper layer's: the image's root as its owner and mode
            # (a root-only one would keep the task's user from every path in its container).
            image_root = os.stat(lower)
            os.chown(upper, image_root.st_uid, image_root.st_gid)
            os.chmod(upper, stat.S_IMODE(image_root.st_mode))
            mount_overlay(lower, upper, work, rootfs)
        except (OSError, ValueError, TemplateError) as exc:
            raise BundleError(f"the task's container could not be prepared: {exc}") from exc
        return config, template

    async def close(self) -> None:
        """The images' mounts given back (tasks still running keep their overlays)."""
        for image in list(self._roots):
            with contextlib.suppress(EngineError):
                await self._podman("image", "unmount", image)
        self._roots.clear()


def _make_points(rootfs: Path, points: list[tuple[str, str | None]]) -> None:
    """The mount points bubblewrap needs in the task's root file system: folders, or files
    where a file is bound (a few system calls: made on the event loop, as the overlay is)."""
    for target, source in points:
        make_mount_point(rootfs, target, directory=source is None or os.path.isdir(source))


def _present(path: str) -> bool | None:
    """A path of the kernel's file systems (/proc, /sys) here: a folder, a file, or absent."""
    if not os.path.lexists(path):
        return None
    return os.path.isdir(path)


def _write_private(path: Path, data: bytes) -> None:
    """``data`` in ``path`` whole or not at all (a task starting meanwhile reads the old one)."""
    partial = path.with_suffix(".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(partial, path)


async def remove_task_containers(program: str, state: Path, name: str) -> None:
    """Every container of a task runc still knows, stopped (SIGKILL) and deleted."""
    for container in runc_containers(state, name):
        code, _, err = await _run(program, "--root", str(state), "delete", "--force", container)
        if code != 0 and container in runc_containers(state, name):
            log.warning("a task's container could not be removed", container=container, why=_last(err))


def remove_rootfs(directory: Path, private: Path) -> None:
    """A task's overlay unmounted and its layers removed; its scripts' bundles too."""
    unmount(directory / ROOTFS)
    for folder in (directory / UPPER, directory / WORK, private / BUNDLES_DIR):
        shutil.rmtree(folder, ignore_errors=True)
    with contextlib.suppress(OSError):
        (directory / ROOTFS).rmdir()
