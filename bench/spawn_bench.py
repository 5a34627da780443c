"""Starting a child from an asyncio service: the event loop's subprocess_exec against subprocess.

The orchestrator starts every task's runtime from its event loop (uvloop, as in `pai up`). This
measures, in a process holding about 100 MB of Python objects as a busy orchestrator does, the
CPU the parent spends per child and the wall time until the child has ended, for N children of
`/bin/true` started one after another: by `asyncio.create_subprocess_exec` (uvloop's fork), and
by `subprocess.Popen` (vfork) with the exit awaited on the child's pidfd, as the local executor
does (`services/orchestrator/adapters/local.py`, `child_exit`).

Command: .venv/bin/python bench/spawn_bench.py [N]
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.orchestrator.adapters.local import child_exit


async def by_the_loop() -> None:
    proc = await asyncio.create_subprocess_exec("/bin/true", stdin=subprocess.DEVNULL, start_new_session=True)
    await proc.wait()


async def by_subprocess() -> None:
    proc = subprocess.Popen(["/bin/true"], stdin=subprocess.DEVNULL, start_new_session=True)  # noqa: ASYNC220
    await child_exit(proc, 0.5)


async def measure(n: int) -> None:
    ballast = [{"i": i, "text": f"object {i}"} for i in range(300_000)]
    ways: dict[str, Callable[[], Awaitable[None]]] = {
        "uvloop's subprocess_exec (fork)": by_the_loop,
        "subprocess.Popen (vfork), pidfd wait": by_subprocess,
    }
    for round_ in range(2):
        for name, start in ways.items():
            cpu, wall = time.process_time(), time.perf_counter()
            for _ in range(n):
                await start()
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            per = f"parent CPU {cpu / n * 1000:.2f} ms, wall {wall / n * 1000:.2f} ms a child"
            print(f"round {round_ + 1}, {name}: {per}")
    del ballast


if __name__ == "__main__":
    uvloop.run(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
