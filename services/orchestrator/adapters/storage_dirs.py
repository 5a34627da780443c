"""Team storages' directories on the node, handed to their storage's group before a task starts.

What the group model is and why: core/storage_groups.py. Here the I/O: the storage's gid is
claimed from the machine's registry of task ids (adapters/isolation.py ``TenantUids``, its own
file ``storage-gids.json`` in the data dir, the same uid range and registry as tenants, so a
storage's gid is never a tenant's), and the storage's directory is given that group, mode 2770
and the default ACL. Only the storage's own directory is touched, through a descriptor opened
without following a link; what tasks made inside it is never changed by the platform. A missing
directory is made (its parent must exist). A directory in the machine's own trees
(libs/protocol/storage_paths.py) is never changed: its tasks get no group for it.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import structlog

from libs.protocol.storage_paths import path_refusal
from services.orchestrator.adapters.isolation import TenantUids
from services.orchestrator.core.storage_groups import (
    DEFAULT_ACL_XATTR,
    STORAGE_MODE,
    default_acl,
    needs_change,
    shared_storages,
)

log = structlog.get_logger(__name__)


def prepare_storage_dir(path: Path, gid: int) -> None:
    """The storage's directory made the group's: group ``gid``, mode 2770, the default ACL.
    OSError when it cannot be (the caller says so and gives no group)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if needs_change(st.st_mode, st.st_gid, gid):
            os.fchown(fd, -1, gid)
            os.fchmod(fd, STORAGE_MODE)
        acl = default_acl()
        try:
            current = os.getxattr(fd, DEFAULT_ACL_XATTR)
        except OSError as exc:
            if exc.errno not in (errno.ENODATA, errno.ENOTSUP):
                raise
            current = b""
        if current != acl:
            try:
                os.setxattr(fd, DEFAULT_ACL_XATTR, acl)
            except OSError as exc:
                if exc.errno != errno.ENOTSUP:
                    raise
                # The group still reads everything; a member's new files are theirs to write alone.
                log.warning(
                    "the storage's file system has no ACLs: files made there are not group-writable",
                    path=str(path),
                )
    finally:
        os.close(fd)


def storage_groups(gids: TenantUids, storages: Iterable[Mapping[str, Any]]) -> tuple[int, ...]:
    """The gids a task of a job that may mount ``storages`` runs with, each storage's directory
    prepared for it; a storage that cannot be prepared is left out (and logged)."""
    groups: list[int] = []
    for name, path in shared_storages(storages):
        refusal = path_refusal(path)
        if refusal:
            log.warning("a storage is not handed to its group", storage=name, why=refusal)
            continue
        gid = gids.user(name).gid
        try:
            prepare_storage_dir(Path(path), gid)
        except OSError as exc:
            log.warning("a storage's directory cannot be made its group's", storage=name, error=str(exc))
            continue
        groups.append(gid)
    return tuple(groups)
