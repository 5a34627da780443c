"""Which node directories may be a team storage: never a system directory.

A ``local`` storage is a directory the platform hands to a group: the orchestrator, as root,
gives the directory the storage's group, mode 2770 and a default ACL (docs/security.md, "Team
storages"). An admin of the platform is not root of the machine, so a storage may not be a
directory the machine itself lives in: the REST API refuses one when it is added
(``PUT /api/v2/storages/{name}``) and the orchestrator never changes one found in a hand-edited
storages file. Pure: no file is looked at.
"""

from __future__ import annotations

from pathlib import PurePosixPath

# The machine's own trees: neither they nor anything below them is ever a storage.
SYSTEM_TREES: tuple[str, ...] = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_TREES += ("/proc", "/run", "/sbin", "/sys", "/usr", "/var/lib/pai")
# Directories that hold others' files: one below them may be a storage, they themselves not.
SHARED_PARENTS = ("/", "/home", "/mnt", "/media", "/opt", "/root", "/srv", "/tmp", "/var", "/var/tmp")


def path_refusal(path: str) -> str:
    """Why ``path`` cannot be a local storage's directory; empty when it can."""
    if not path.startswith("/"):
        return f"data.path must be an absolute path, got {path!r}"
    pure = PurePosixPath(path)
    if ".." in pure.parts:
        return f"data.path must not contain '..', got {path!r}"
    if str(pure) in SHARED_PARENTS:
        return f"data.path {path} holds other files of the machine; name a directory of its own below it"
    for tree in SYSTEM_TREES:
        if pure == PurePosixPath(tree) or PurePosixPath(tree) in pure.parents:
            return f"data.path {path} is in the system tree {tree}; name a directory such as /srv/NAME"
    return ""
