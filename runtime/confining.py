"""The runtime's side of a task's containment: its limits first, and never root on the task's paths.

The runtime of a root platform runs as root: it must, to start the task's commands as the
task's user. Two things follow.

- Before anything of the task runs, the runtime enters the task's cgroups (or sets its rlimits),
  so everything it starts is held to the task's limits and cannot leave them. If that fails the
  task does not run: the runtime exits with CONFINE_FAILED, a platform failure that is retried.
- Whatever it writes inside the task's work dir (ssh keys, storage links) it writes *as the task's
  user* (``acting_as``: effective uid and gid, no supplementary groups), so a symlink the task put
  where a file was expected leads nowhere the task could not already write itself.
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Iterator
from pathlib import Path

from runtime.spec import Confine, RunAs


class ConfineError(OSError):
    """The task's limits could not be put in place."""


def confine_self(confine: Confine | None) -> None:
    """Enter the task's cgroups and set its rlimits, for this process and all it starts."""
    if confine is None:
        return
    pid = str(os.getpid())
    for group in confine.cgroups:
        try:
            with open(group / "cgroup.procs", "w") as procs:
                procs.write(pid)
        except OSError as exc:
            raise ConfineError(exc.errno, f"cannot enter the task's cgroup {group}: {exc.strerror}") from exc
    for name, value in confine.rlimits.items():
        which = getattr(resource, name, None)
        if not isinstance(which, int):
            raise ConfineError(0, f"no resource limit {name} on this system")
        try:
            _soft, hard = resource.getrlimit(which)
            limit = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (limit, limit))
        except (OSError, ValueError) as exc:
            raise ConfineError(0, f"cannot set {name} to {value}: {exc}") from exc


@contextlib.contextmanager
def acting_as(run_as: RunAs | None, where: Path) -> Iterator[None]:
    """File system work in ``where`` (a task's work dir) as the task's user: what it creates is
    the user's, what it cannot reach (a root-only folder behind a symlink) fails.

    The runtime moves into ``where`` first, as root (the way to it is the platform's), and the
    caller names paths relative to it: the task's user need not be able to walk the folders above
    its work dir (a data dir under /root). Without a user, or without root, only the move."""
    where.mkdir(parents=True, exist_ok=True)  # the platform's path, made as the runtime
    here = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.chdir(where)
        if run_as is None or os.geteuid() != 0:
            yield
            return
        groups = os.getgroups()
        egid = os.getegid()
        os.setgroups([])
        os.setegid(run_as.gid)
        os.seteuid(run_as.uid)
        try:
            yield
        finally:
            os.seteuid(0)
            os.setegid(egid)
            os.setgroups(groups)
    finally:
        os.fchdir(here)
        os.close(here)
