"""The storage plugin: the storages a job asks for, made visible at their mount paths.

Only storages listed in the task spec (those the user's groups may use) are ever made visible;
asking for any other is refused. Locally there are no mounts: a storage of type ``local`` or
``nfs`` (already mounted on the node) is a symbolic link at its mount path taken relative to the
task's work dir, so ``/mnt/data`` appears as ``<work dir>/mnt/data``.

Parameters (OpenPAI's storage and teamwise_storage plugins):
    storages: [{name, mountPath?}]   the storages to use, mount path overriding the storage's own
    storageConfigNames: [name]       the same, by name only
    neither                          the user's default storages
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from runtime.confining import acting_as
from runtime.errors import PluginError
from runtime.spec import StorageSpec, TaskSpec

LINKABLE_TYPES = ("local", "nfs")


def _error(message: str) -> PluginError:
    return PluginError(message)


def requested_storages(
    parameters: dict[str, Any], allowed: list[StorageSpec]
) -> list[tuple[StorageSpec, str]]:
    """(storage, mount path) for each storage asked for; refuses storages not in ``allowed``."""
    by_name = {s.name: s for s in allowed}
    wanted: list[tuple[str, str | None]] = []
    if "storages" in parameters:
        entries = parameters["storages"]
        if not isinstance(entries, list):
            raise _error("storage plugin parameters.storages: must be a list of {name, mountPath}")
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise _error(f"storage plugin parameters.storages[{i}]: needs a name")
            mount = entry.get("mountPath")
            wanted.append((entry["name"], mount if isinstance(mount, str) else None))
    elif parameters.get("storageConfigNames"):
        names = parameters["storageConfigNames"]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _error("storage plugin parameters.storageConfigNames: must be a list of names")
        wanted = [(n, None) for n in names]
    else:
        wanted = [(s.name, None) for s in allowed if s.default]
        if not wanted:
            raise _error("storage plugin: no storage named and the user has no default storage")
    refused = sorted(name for name, _ in wanted if name not in by_name)
    if refused:
        raise _error(
            f"storage plugin: the user may not use storages {refused}; "
            f"usable storages are {sorted(by_name) or 'none'}"
        )
    return [(by_name[name], mount or by_name[name].mount_path) for name, mount in wanted]


def mount_point(work_dir: Path, mount_path: str) -> Path:
    """Where a mount path lands under the work dir; it may not climb out of it."""
    relative = PurePosixPath(mount_path.lstrip("/"))
    if not relative.parts or ".." in relative.parts:
        raise _error(f"storage plugin: mount path {mount_path!r} must name a directory without '..'")
    return work_dir.joinpath(*relative.parts)


def link_storages(parameters: dict[str, Any], task: TaskSpec, log: Callable[[str], None]) -> dict[str, Any]:
    """Link every requested storage; returns {mount path: storage name} for the result file."""
    linked: dict[str, Any] = {}
    for storage, mount_path in requested_storages(parameters, task.storages):
        if storage.type not in LINKABLE_TYPES:
            raise _error(
                f"storage plugin: storage {storage.name!r} has type {storage.type!r}; "
                f"this runtime can only link {', '.join(LINKABLE_TYPES)} storages"
            )
        source = Path(storage.path)
        if not source.is_dir():
            raise _error(f"storage plugin: storage {storage.name!r} path {storage.path} is not a directory")
        # In the task's work dir, as the task's user: a link of the task's own on the way leads
        # only where that user may write (the path is relative to the work dir acting_as enters).
        target = mount_point(task.dirs.work_dir, mount_path).relative_to(task.dirs.work_dir)
        with acting_as(task.run_as, task.dirs.work_dir):
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink() or target.exists():
                if target.is_symlink() and os.readlink(target) == str(source):
                    linked[mount_path] = storage.name
                    continue
                raise _error(f"storage plugin: mount path {mount_path} is already used in the work dir")
            target.symlink_to(source, target_is_directory=True)
        log(f"storage {storage.name} linked at {mount_path}")
        linked[mount_path] = storage.name
    return {"linked": linked}
