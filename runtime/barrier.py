"""The gang barrier: no user command starts before every task of the attempt is up.

Locally the barrier is a directory shared by the attempt's tasks. Each task announces itself by
writing ``<role>-<index>.ready`` atomically (write a temporary file, then rename) and waits until
every expected peer has done so. A directory has no event source that works everywhere (and
inotify allows a user 128 instances, fewer than a large gang's tasks), so the wait polls against
a monotonic deadline (wall-clock jumps do not matter), at an interval that grows with the gang.

Listing the directory is what costs: over half a millisecond for a gang of 1,000, and every
waiting task polls. So the task that finds every peer ready says so in one file, ``.all-ready``,
and a poll is a look at that file. A task lists the directory right after announcing itself: the
last to announce lists after every other announcement, finds them all and writes the file, so the
gang passes within one interval of its last peer. In case that task dies first, every waiting
task also lists the directory itself every LIST_EVERY polls.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from runtime.spec import TaskPlacement

POLL_INTERVAL_S = 0.05
MAX_POLL_INTERVAL_S = 0.5
LIST_EVERY = 10
"""A waiting task lists the directory itself on this many polls' first (the others look for the
gang's `.all-ready`)."""
ALL_READY = ".all-ready"


def ready_file(directory: Path, role: str, index: int) -> Path:
    return directory / f"{role}-{index}.ready"


def announce(directory: Path, me: TaskPlacement) -> None:
    """Mark this task ready; the file also says where it runs, for whoever inspects the barrier."""
    directory.mkdir(parents=True, exist_ok=True)
    target = ready_file(directory, me.role, me.index)
    tmp = directory / f".{target.name}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"role": me.role, "index": me.index, "hostIp": me.host_ip, "pid": os.getpid()}))
    os.replace(tmp, target)


def missing_peers(directory: Path, expected: Iterable[tuple[str, int]]) -> list[str]:
    try:
        present = set(os.listdir(directory))
    except FileNotFoundError:
        present = set()
    return [f"{r}-{i}" for r, i in expected if f"{r}-{i}.ready" not in present]


def poll_interval(gang: int) -> float:
    """50 ms up to 100 tasks, then 50 ms more per 100 tasks, at most 0.5 s."""
    return min(MAX_POLL_INTERVAL_S, POLL_INTERVAL_S * max(1, gang // 100))


def wait_for_peers(
    directory: Path,
    expected: Iterable[tuple[str, int]],
    timeout_s: float,
    should_stop: Callable[[], bool] = lambda: False,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Wait until every expected peer is ready; returns the peers still missing ([] on success).

    Returns early, with the missing peers, when ``should_stop`` says the task is being stopped.
    """
    wanted = list(expected)
    interval = poll_interval(len(wanted))
    deadline = clock() + timeout_s
    polls = 0
    while True:
        if polls % LIST_EVERY == 0:
            if not missing_peers(directory, wanted):
                _all_ready(directory)
                return []
        elif (directory / ALL_READY).exists():  # ready files are never taken back
            return []
        polls += 1
        remaining = deadline - clock()
        if should_stop() or remaining <= 0:
            return missing_peers(directory, wanted)
        sleep(min(interval, remaining))


def _all_ready(directory: Path) -> None:
    """Tell the gang's other waiting tasks that every peer is ready (written once; later writers
    find it there)."""
    target = directory / ALL_READY
    if target.exists():
        return
    tmp = directory / f".{ALL_READY}.{os.getpid()}.tmp"
    tmp.write_text("")
    os.replace(tmp, target)
