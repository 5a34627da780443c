"""The gang barrier: no user command starts before every task of the attempt is up.

Locally the barrier is a directory shared by the attempt's tasks. Each task announces itself by
writing ``<role>-<index>.ready`` atomically (write a temporary file, then rename) and waits until
every expected peer has done so. A directory has no event source that works everywhere, so the
wait polls against a monotonic deadline (wall-clock jumps do not matter). A poll is one listing
of the directory, not a look-up per peer, and its interval grows with the gang: every waiting
task polls, so a gang of 1,000 polling every 50 ms for 1,000 files each would spend the
machine's CPU on waiting (a small gang still passes within 50 ms of its last peer).
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
    while True:
        missing = missing_peers(directory, wanted)
        if not missing or should_stop():
            return missing
        remaining = deadline - clock()
        if remaining <= 0:
            return missing
        sleep(min(interval, remaining))
