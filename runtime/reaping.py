"""A host task's processes held together without cgroups: the runtime adopts what its command
leaves behind, and ends it with the task (imports nothing heavy: every task's runtime loads it)."""

from __future__ import annotations

import contextlib
import os
import sys

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Keep every process the task starts under this runtime: one that leaves its parent (a
    daemon's double fork, ``setsid ... &`` in a script that then ends) is re-parented here rather
    than to the machine's init, so it is still found, and ended, with the task. Where the task
    has no cgroup and no sandbox of its own, this tree is all that holds it together."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def kill_descendants(pid: int, rounds: int = 5) -> int:
    """SIGKILL every live process below ``pid`` (not ``pid`` itself), again while any is found
    (one may fork while the others die); returns how many were signalled."""
    import time

    import psutil  # only here: a runtime itself never needs it to start

    def alive_below() -> list[psutil.Process]:
        try:
            below = psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            return []
        live = []
        for proc in below:
            with contextlib.suppress(psutil.Error):
                if proc.status() != psutil.STATUS_ZOMBIE:
                    live.append(proc)
        return live

    signalled = 0
    for _ in range(rounds):
        live = alive_below()
        if not live:
            break
        for proc in live:
            with contextlib.suppress(psutil.Error):
                proc.kill()
                signalled += 1
        deadline = time.monotonic() + 1.0
        while alive_below() and time.monotonic() < deadline:
            time.sleep(0.02)
    return signalled


def end_leftovers() -> int:
    """At a host task's end: SIGKILL what its command left running (a pod's processes end with
    its container); nothing to look up, and psutil not even imported, when nothing is left."""
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:  # no child at all: the common case
        return 0
    return kill_descendants(os.getpid())
