"""The bubblewrap processes that run a platform's containers, found by what their arguments name."""

from __future__ import annotations

from pathlib import Path


def bwrap_processes(naming: str) -> list[str]:
    """``bwrap PID`` of each bubblewrap process one of whose arguments holds ``naming`` (a job's
    id, a data dir: the sandbox's working directory is the task's work dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[0].endswith(b"bwrap") and any(naming.encode() in a for a in argv):
                found.append(f"bwrap {entry.name}")
    return found
