"""Team storages: a group id per storage, which every task allowed to mount it runs with.

Each tenant's tasks run under a uid and gid of their own (adapters/isolation.py), so a file one
member's task writes is not another member's to change. A ``local`` storage therefore gets a
gid of its own, given out like a tenant's uid (a claim in the machine's registry, kept for good,
adapters/isolation.py ``TenantUids``), and:

- its directory belongs to that group, mode 2770: the group may read and write, nobody else
  may enter; the setgid bit gives everything made inside the same group;
- its directory carries a default ACL ``user::rwx, group::rwx, other::---``: files and folders
  made inside are group-writable and closed to others whatever the writer's umask, and inherit
  the default themselves;
- a task whose job may mount it (the storages REST resolved from the submitter's groups at
  submission, ``job.submitted.storages``) runs with that gid as a supplementary group, on the
  host (``setpriv --groups``) and in a container (``--group-add``, runc's ``additionalGids``).

The kernel then enforces the grant: a member of a group the storage is granted to reads and
writes everything in it, anyone else is refused by the directory's mode, whatever path they
reach it by. The gid belongs to the storage, not to a group, because a directory has one group
and a storage may be granted to several groups. Pure: the decisions and the ACL's bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any

STORAGE_MODE = 0o2770
"""rwx for the owner (root) and the storage's group, nothing for others, setgid."""
SHARED_TYPES = ("local",)
"""The types whose directory the platform hands to the group: a directory on the node. An NFS
export's permissions are its server's."""

DEFAULT_ACL_XATTR = "system.posix_acl_default"
_ACL_VERSION = 2
_UNDEFINED_ID = 0xFFFFFFFF
_USER_OBJ, _GROUP_OBJ, _OTHER = 0x01, 0x04, 0x20


def default_acl() -> bytes:
    """The directory's default ACL (the kernel's xattr form, as ``setfacl -d -m u::rwx,g::rwx,o::-``
    writes it): what is made inside is the group's to write, others' to nothing."""
    entries = ((_USER_OBJ, 0o7), (_GROUP_OBJ, 0o7), (_OTHER, 0o0))
    return struct.pack("<I", _ACL_VERSION) + b"".join(
        struct.pack("<HHI", tag, perm, _UNDEFINED_ID) for tag, perm in entries
    )


def shared_storages(storages: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(name, node path) of the job's storages whose directory its tasks share through a group."""
    chosen: dict[str, str] = {}
    for storage in storages:
        if storage.get("type") in SHARED_TYPES and storage.get("path"):
            chosen.setdefault(str(storage["name"]), str(storage["path"]))
    return sorted(chosen.items())


def needs_change(mode: int, gid: int, want_gid: int) -> bool:
    """Whether a storage directory's group or mode is not yet the storage's."""
    return gid != want_gid or (mode & 0o7777) != STORAGE_MODE
