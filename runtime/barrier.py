"""The gang barrier: no user command starts before every task of the attempt is up.

Locally the barrier is a directory shared by the attempt's tasks. Each task announces itself by
writing ``<role>-<index>.ready`` atomically (write a temporary file, then rename) and waits until
every expected peer has done so. A directory has no event source that works everywhere, so the
wait polls at a short interval against a monotonic deadline (wall-clock jumps do not matter).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from runtime.spec import TaskPlacement

POLL_INTERVAL_S = 0.05


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
    return [f"{r}-{i}" for r, i in expected if not ready_file(directory, r, i).exists()]


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
    deadline = clock() + timeout_s
    while True:
        missing = missing_peers(directory, wanted)
        if not missing or should_stop():
            return missing
        remaining = deadline - clock()
        if remaining <= 0:
            return missing
        sleep(min(POLL_INTERVAL_S, remaining))
