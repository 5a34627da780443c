"""A task runtime as the machine shows it, and how one is found again by it.

Spawned, a runtime's command line is ``<python> -S -m runtime --spec FILE``; forked by the fork
server (runtime/forkserver.py), it takes that same line as its title. So `ps` shows both alike, and
a restarted orchestrator (or `pai up`) finds a task's runtime by its spec path, whichever started it.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil


def runtime_command(spec_file: Path | str) -> list[str]:
    """How a task's runtime starts: ``-S`` skips the site module (its .pth files, an editable
    install's finder among them, cost every task about 15 ms before anything of its own runs); the
    executor's PYTHONPATH says where the platform's code and its dependencies are instead."""
    return [sys.executable, "-S", "-m", "runtime", "--spec", str(spec_file)]


def find_runtimes(spec_prefix: Path | str) -> list[psutil.Process]:
    """The runtimes whose spec path starts with `spec_prefix` (one spec file, or a data dir and a
    separator). Compared on the whole line: a forked runtime's title may read back split at every
    space of its path."""
    import psutil  # only here: a runtime itself never needs it to start

    needle = f" -m runtime --spec {spec_prefix}"
    found = []
    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if needle in " ".join(process.info.get("cmdline") or []):
                found.append(process)
    return found
